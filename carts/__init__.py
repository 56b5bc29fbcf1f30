"""Carts and their items, and the nightly ``clean-carts`` job that deletes the stale ones.
It imports the engine and the core only."""
