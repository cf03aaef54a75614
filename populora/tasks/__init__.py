"""The AZR task domain (spec 2-4, 10-11): task types, prompts, parsers, validation rules, rewards, buffers and
complexity metrics. No network, no database, no global state."""

from populora.tasks.buffers import BufferSet
from populora.tasks.complexity import complexity
from populora.tasks.jobs import STATUSES, Job, JobResult, Runner
from populora.tasks.prompts import student_messages, teacher_messages
from populora.tasks.rewards import OUTCOMES, mean_rho, student_reward, teacher_reward
from populora.tasks.triplet import TASK_TYPES, Triplet, identity_triplet
from populora.tasks.verify import (
                                   REASONS,
                                   Attempt,
                                   Check,
                                   Proposal,
                                   Validation,
                                   check_answers,
                                   validate_proposals,
)

__all__ = ["TASK_TYPES", "Triplet", "identity_triplet", "teacher_messages", "student_messages", "student_reward",
           "teacher_reward", "mean_rho", "BufferSet", "complexity", "Job", "JobResult", "Runner", "STATUSES",
           "OUTCOMES", "REASONS", "Proposal", "Validation", "Attempt", "Check", "validate_proposals",
           "check_answers"]
