"""Tiered storage's built-in remote storage (KIP-405): segments and their metadata in a directory."""
