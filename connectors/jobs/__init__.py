"""embedtext.connectors.jobs: keep an embeddings table in step with a source relation.

``IndexSpec`` says what to index; ``run_index`` runs one incremental, resumable pass;
``run_on_schedule`` repeats it every interval or on a cron expression.
"""

from embedtext.connectors.jobs.runner import IndexSummary, run_index
from embedtext.connectors.jobs.schedule import run_on_schedule
from embedtext.connectors.jobs.spec import IndexSpec

__all__ = ["IndexSpec", "IndexSummary", "run_index", "run_on_schedule"]
