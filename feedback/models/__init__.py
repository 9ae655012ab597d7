from .evaluation import Evaluation
from .run import AppliedStrategy, Run
from .step import Step, StepAttempt
from .strategy import Strategy, StrategyEvent, StrategyVersion
from .task import Task, Workspace
from .tool import ToolConfirmation, ToolSetting

__all__ = [
    "AppliedStrategy",
    "Evaluation",
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
