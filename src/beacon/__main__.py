"""`python -m beacon` runs the command line."""

from beacon.cli import main

if __name__ == "__main__":  # not when a spawned process (`beacon.stages`) re-imports it
    main()
