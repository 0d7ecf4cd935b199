"""Recorded conversations and OpenTelemetry traces evaluated without a target."""
