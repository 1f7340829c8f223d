"""`beacon demo`: a miniature, offline reproduction of the Beacon and ReVuE findings on a CPU."""
