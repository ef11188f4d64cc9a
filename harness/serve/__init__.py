"""Runners start a server for a cell and stop it: Docker containers or a local Python env."""
