"""Targets: the Agent and Workflow protocols, their run records, adapters and the demo agents."""

from evalpipe.targets.base import Agent, AgentResponse, TargetRun
from evalpipe.targets.maf import MAFWorkflow
from evalpipe.targets.openai_chat import OpenAIChatAgent
from evalpipe.targets.workflow import (
    ExecutorRun,
    RouterWorkflow,
    SequentialWorkflow,
    Workflow,
    WorkflowRun,
)

__all__ = [
    "Agent",
    "AgentResponse",
    "ExecutorRun",
    "MAFWorkflow",
    "OpenAIChatAgent",
    "RouterWorkflow",
    "SequentialWorkflow",
    "TargetRun",
    "Workflow",
    "WorkflowRun",
]
