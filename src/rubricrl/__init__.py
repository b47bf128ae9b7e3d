"""rubricrl: rubric rewards for reinforcement learning of language models.

Data flows one way: rubric -> judge -> verdicts -> score -> reward -> trainer.
"""

from rubricrl.core.messages import Message, as_conversation
from rubricrl.judges import JudgeRequest, make_judge
from rubricrl.core.problems import Problem, RubricError
from rubricrl.rubrics.loading import load_rubric, rubric_from_data
from rubricrl.rubrics.model import Criterion, Rubric
from rubricrl.scoring.formulas import Estimate, RowScore, bootstrap, clipped_mean, score_row
from rubricrl.core.verdicts import Status, Verdict

__version__ = "0.1.0"

__all__ = [
    "Criterion", "Rubric", "load_rubric", "rubric_from_data", "RubricError", "Problem",
    "Message", "as_conversation", "JudgeRequest", "make_judge", "Status", "Verdict",
    "score_row", "RowScore", "bootstrap", "clipped_mean", "Estimate",
]
