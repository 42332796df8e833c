"""`lachesis-cli`: the operator's command line for the Lachesis controller."""
