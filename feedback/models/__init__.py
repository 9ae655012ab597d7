from .account import LoginFailures
from .evaluation import Evaluation, EvaluationProfile
from .lock import JobLock
from .run import AppliedStrategy, Run
from .stats import DailyRunStats, DailyToolLatency, DailyToolStats
from .step import Step, StepAttempt
from .strategy import Strategy, StrategyEvent, StrategyVersion
from .task import Task, Workspace
from .token import ApiToken
from .tool import ToolConfirmation, ToolSetting

__all__ = [
    "ApiToken",
    "AppliedStrategy",
    "DailyRunStats",
    "DailyToolLatency",
    "DailyToolStats",
    "Evaluation",
    "EvaluationProfile",
    "JobLock",
    "LoginFailures",
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
