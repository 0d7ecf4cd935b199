"""Loopback servers the tests start: an OpenAI-compatible chat server and a Foundry evals emulator."""
