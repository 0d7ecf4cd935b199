"""Targets: the Agent protocol, one call's record (TargetRun), and the scripted demo agents."""

from evalpipe.targets.base import Agent, AgentResponse, TargetRun

__all__ = ["Agent", "AgentResponse", "TargetRun"]
