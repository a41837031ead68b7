"""Renderers: each takes the model (and its options, in its constructor) and returns text."""
