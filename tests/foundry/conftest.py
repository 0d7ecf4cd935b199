"""Fixtures for the Foundry tests: the loopback emulator and real azure-ai-projects clients on it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from azure.ai.projects import AIProjectClient
from azure.ai.projects.aio import AIProjectClient as AsyncAIProjectClient
from azure.core.credentials import AccessToken, AccessTokenInfo

from evalpipe.foundry._evals import async_transport
from fakes.foundry_emulator import FoundryEmulator

TOKEN = "test-token"


class StaticCredential:
    """A sync credential that always hands out the same bearer token."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(TOKEN, int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo(TOKEN, int(time.time()) + 3600)


class AsyncStaticCredential:
    """The async flavour, for azure.ai.projects.aio."""

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(TOKEN, int(time.time()) + 3600)

    async def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo(TOKEN, int(time.time()) + 3600)

    async def close(self) -> None:
        return None


@pytest.fixture
def emulator() -> Iterator[FoundryEmulator]:
    """A running emulator that requires the test token; stopped after the test."""
    emu = FoundryEmulator(token=TOKEN).start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
async def aio_project(emulator: FoundryEmulator) -> AsyncIterator[AsyncAIProjectClient]:
    """The real aio AIProjectClient pointed at the emulator."""
    client = AsyncAIProjectClient(
        endpoint=emulator.endpoint, credential=AsyncStaticCredential(), **async_transport()
    )
    async with client:
        yield client


@pytest.fixture
def sync_project(emulator: FoundryEmulator) -> Iterator[AIProjectClient]:
    """The real sync AIProjectClient pointed at the emulator."""
    with AIProjectClient(endpoint=emulator.endpoint, credential=StaticCredential()) as client:
        yield client
