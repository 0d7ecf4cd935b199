"""Environment variable names read in more than one place (kept light to import)."""

FOUNDRY_ENDPOINT_ENV = "AZURE_AI_PROJECT_ENDPOINT"
"""The Microsoft Foundry project endpoint, when none is passed."""
