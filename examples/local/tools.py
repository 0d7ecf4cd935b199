"""The demo agent's tool: a small deterministic weather table (no network, same answer every time)."""

from __future__ import annotations

WEATHER: dict[str, tuple[str, int]] = {
    "paris": ("sunny", 21),
    "oslo": ("snowy", -3),
    "tokyo": ("rainy", 18),
    "cairo": ("hot and dry", 35),
    "london": ("cloudy", 14),
}


def get_weather(city: str) -> dict[str, str]:
    """Get the current weather for a city."""
    condition, celsius = WEATHER.get(city.strip().lower(), ("unknown", 0))
    if condition == "unknown":
        return {"city": city, "error": f"no weather data for {city!r}"}
    return {"city": city, "condition": condition, "temperature": f"{celsius}°C"}
