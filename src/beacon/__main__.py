"""`python -m beacon` runs the command line."""

from beacon.cli import main

main()
