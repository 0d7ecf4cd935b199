"""Targets: the Agent and Workflow protocols, adapters (OpenAI-compatible chat, MAF) and the demo
agents. What a call records (TargetRun, WorkflowRun) lives in ``evalpipe.transcripts``."""

from evalpipe.targets.base import Agent, AgentResponse
from evalpipe.targets.maf import MAFWorkflow
from evalpipe.targets.openai_chat import OpenAIChatAgent
from evalpipe.targets.workflow import RouterWorkflow, SequentialWorkflow, Workflow

__all__ = [
    "Agent",
    "AgentResponse",
    "MAFWorkflow",
    "OpenAIChatAgent",
    "RouterWorkflow",
    "SequentialWorkflow",
    "Workflow",
]
