from .account import LoginFailures
from .alert import AlertAttempt, AlertDelivery, AlertIncident, AlertRule
from .cost import ModelPrice
from .dataset import Dataset, DatasetItem, DatasetVersion
from .evaluation import Evaluation, EvaluationProfile
from .experiment import Experiment, ExperimentPair
from .idempotency import IdempotencyKey
from .inbox import InboxClaim
from .lock import JobLock
from .mcp import McpServer, McpToolOverride
from .playground import PlaygroundRun
from .run import AppliedStrategy, Run
from .score import ScoreConfig, ScoreValue
from .stats import DailyRunStats, DailyToolLatency, DailyToolStats
from .step import Step, StepAttempt
from .strategy import InsightPair, Strategy, StrategyEvent, StrategyVersion
from .task import Task, Workspace
from .token import ApiToken
from .tool import ToolConfirmation, ToolSetting

__all__ = [
    "AlertAttempt",
    "AlertDelivery",
    "AlertIncident",
    "AlertRule",
    "ApiToken",
    "AppliedStrategy",
    "DailyRunStats",
    "DailyToolLatency",
    "DailyToolStats",
    "Dataset",
    "DatasetItem",
    "DatasetVersion",
    "Evaluation",
    "EvaluationProfile",
    "Experiment",
    "ExperimentPair",
    "IdempotencyKey",
    "InboxClaim",
    "InsightPair",
    "JobLock",
    "LoginFailures",
    "McpServer",
    "McpToolOverride",
    "ModelPrice",
    "PlaygroundRun",
    "Run",
    "ScoreConfig",
    "ScoreValue",
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
