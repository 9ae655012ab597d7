from .account import LoginFailures
from .evaluation import Evaluation, EvaluationProfile
from .lock import JobLock
from .mcp import McpServer, McpToolOverride
from .run import AppliedStrategy, Run
from .stats import DailyRunStats, DailyToolLatency, DailyToolStats
from .step import Step, StepAttempt
from .strategy import Strategy, StrategyEvent, StrategyVersion
from .task import Task, Workspace
from .tool import ToolConfirmation, ToolSetting

__all__ = [
    "AppliedStrategy",
    "DailyRunStats",
    "DailyToolLatency",
    "DailyToolStats",
    "Evaluation",
    "EvaluationProfile",
    "JobLock",
    "LoginFailures",
    "McpServer",
    "McpToolOverride",
    "Run",
    "Step",
    "StepAttempt",
    "Strategy",
    "StrategyEvent",
    "StrategyVersion",
    "Task",
    "ToolConfirmation",
    "ToolSetting",
    "Workspace",
]
