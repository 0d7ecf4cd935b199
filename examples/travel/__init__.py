"""The travel demo: a scripted weather-and-hotels agent and its query set (no model, no network)."""
