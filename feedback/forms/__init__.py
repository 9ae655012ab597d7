"""The forms, by the page family they serve; every name importable from ``feedback.forms``."""

from .accounts import ApiTokenForm, LoginForm
from .experiments import ExperimentForm
from .filters import AlertFilterForm, MetricsFilterForm, RunCompareForm, RunFilterForm
from .inbox import InboxFilterForm, ProposalDecisionForm
from .playground import PlaygroundForm
from .review import ConfirmationForm, HumanScoreForm, MiningScheduleForm, StrategyDecisionForm, StrategyEditForm
from .tasks import (
    ERROR_SIGNATURE,
    KIND_HELP,
    SAFE_NAME,
    UPLOAD_EXTENSIONS,
    UPLOAD_MAX_BYTES,
    UPLOAD_MAX_FILES,
    MultipleFileField,
    TaskForm,
    check_upload,
    kind_help,
)

__all__ = [
    "ERROR_SIGNATURE",
    "KIND_HELP",
    "SAFE_NAME",
    "UPLOAD_EXTENSIONS",
    "UPLOAD_MAX_BYTES",
    "UPLOAD_MAX_FILES",
    "AlertFilterForm",
    "ApiTokenForm",
    "ConfirmationForm",
    "ExperimentForm",
    "HumanScoreForm",
    "InboxFilterForm",
    "LoginForm",
    "MetricsFilterForm",
    "MiningScheduleForm",
    "MultipleFileField",
    "PlaygroundForm",
    "ProposalDecisionForm",
    "RunCompareForm",
    "RunFilterForm",
    "StrategyDecisionForm",
    "StrategyEditForm",
    "TaskForm",
    "check_upload",
    "kind_help",
]
