"""rubricrl: rubric rewards for reinforcement learning of language models.

Data flows one way: rubric -> judge -> verdicts -> score -> reward -> trainer.
"""

from .conversation import Message, as_conversation
from .judges import JudgeRequest, make_judge
from .loading import Problem, RubricError, load_rubric, rubric_from_data
from .rubric import Criterion, Rubric
from .scoring import Estimate, RowScore, bootstrap, clipped_mean, score_row
from .verdict import Status, Verdict

__version__ = "0.1.0"

__all__ = [
    "Criterion", "Rubric", "load_rubric", "rubric_from_data", "RubricError", "Problem",
    "Message", "as_conversation", "JudgeRequest", "make_judge", "Status", "Verdict",
    "score_row", "RowScore", "bootstrap", "clipped_mean", "Estimate",
]
