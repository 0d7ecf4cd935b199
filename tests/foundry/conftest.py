"""Fixtures for the Foundry tests: the loopback emulator and real azure-ai-projects clients on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from azure.ai.projects import AIProjectClient
from azure.ai.projects.aio import AIProjectClient as AsyncAIProjectClient

from evalpipe.foundry import async_transport
from fakes.foundry_emulator import TOKEN, AsyncStaticCredential, FoundryEmulator, StaticCredential


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
