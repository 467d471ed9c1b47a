"""The SQL of a pass's writes: one statement per kind of change of a
:class:`~dse.record._batch.Batch` (:data:`STATEMENTS`), and the claims and id blocks."""

from __future__ import annotations

INSERT_PROGRESS = (
    "INSERT OR IGNORE INTO progress(trial_id, attempt, step, metrics, at) VALUES (?,?,?,?,?)"
)

INSERT_DECISION = (
    "INSERT INTO decisions(campaign_id, trial_id, attempt, rule, rule_version, verdict, rung,"
    " step, value, cutoff, peers, compared, reason, bracket, at)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)

DECISION = ("d.trial_id, t.number, d.attempt, d.rule, d.rule_version, d.verdict, d.rung,"
             " d.step, d.value, d.cutoff, d.peers, d.compared, d.reason, d.bracket, d.at")

INSERT_TRIAL = (
    "INSERT INTO trials(id, campaign_id, number, proposal, wave, config_hash, params, status,"
    " failure, message, metrics, score, cache_of, trial_dir, created_at, ended_at,"
    " data_version, stop_step, scores) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)

INSERT_ATTEMPT = (
    "INSERT INTO attempts(id, trial_id, attempt, backend, job_id, state, submitted_at,"
    " resumed) VALUES (?,?,?,?,?,?,?,?)"
)

UPDATE_ATTEMPT = (
    "UPDATE attempts SET job_id=?, state=?, started_at=COALESCE(?, started_at) WHERE id=?"
)

END_ATTEMPT = (
    "UPDATE attempts SET job_id=?, state=?, exit_code=?, signal=?, node=?, reason=?,"
    " peak_rss_kb=?, started_at=COALESCE(?, started_at), ended_at=?, work_lost_s=?,"
    " spend=COALESCE(?, spend) WHERE id=?"
)

TRIAL_DATA = (
    "UPDATE trials SET data_version=COALESCE(?, data_version),"
    " data_version_read=COALESCE(?, data_version_read) WHERE id=?"
)

END_TRIAL = (
    "UPDATE trials SET status=?, failure=?, message=?, metrics=?, score=?, ended_at=?, stop_step=?,"
    " scores=? WHERE id=?"
)

INSERT_ENVIRONMENT = (
    "INSERT OR IGNORE INTO environments(digest, python, distributions) VALUES (?,?,?)"
)

LINK_TRIAL = (
    "UPDATE trials SET dependencies=COALESCE(?, dependencies), replaces=COALESCE(?, replaces)"
    " WHERE id=?"
)

INSERT_SCORE = (
    "INSERT INTO scores(trial_id, scorer, scorer_version, score, baseline_trial, created_at,"
    " scores) VALUES (?,?,?,?,?,?,?)"
)

INSERT_EVENT = "INSERT INTO events(campaign_id, trial_id, at, kind, data) VALUES (?,?,?,?,?)"

INSERT_AGENT_CALL = (
    "INSERT INTO agent_log(campaign_id, kind, n, proposals, in_flight, stops)"
    " VALUES (?,?,?,?,?,?)"
)

SNAPSHOT = (
    "INSERT INTO agent_snapshots(campaign_id, log_id, state, unobserved) VALUES (?,?,?,?)"
    " ON CONFLICT (campaign_id) DO UPDATE SET log_id = excluded.log_id,"
    " state = excluded.state, unobserved = excluded.unobserved"
)

END_CAMPAIGN = "UPDATE campaigns SET status=?, end_reason=?, ended_at=? WHERE id=?"

RUN_INSTEAD = (
    "UPDATE trials SET status=?, failure=?, message=?, cache_of=NULL, trial_dir=?, ended_at=?"
    " WHERE id=?"
)

RELINK = "UPDATE trials SET cache_of=? WHERE id=?"

RELEASE = "DELETE FROM claims WHERE trial_id=?"

CLAIM = (
    "INSERT INTO claims(config_hash, trial_id, campaign, claimed_at) VALUES (?,?,?,?)"
    " ON CONFLICT (config_hash) DO UPDATE SET trial_id = excluded.trial_id,"
    " campaign = excluded.campaign, claimed_at = excluded.claimed_at"
)

INSERT_CAMPAIGN = (
    "INSERT INTO campaigns(name, source, spec, agent, backend, mode, max_parallelism,"
    " status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?)"
)

RESERVE = (
    "UPDATE counters SET next = MAX(next, (SELECT COALESCE(MAX(id), 0) + 1 FROM {table})) + ?"
    " WHERE name = ? RETURNING next"
)

FIRST_BLOCK, LAST_BLOCK = 64, 4096


STATEMENTS: dict[str, str] = {
    "trials": INSERT_TRIAL,
    "reruns": RUN_INSTEAD,
    "relinks": RELINK,
    "attempts": INSERT_ATTEMPT,
    "attempt_updates": UPDATE_ATTEMPT,
    "attempt_ends": END_ATTEMPT,
    "attempt_usage": "UPDATE attempts SET usage=? WHERE id=?",
    "attempt_left": "UPDATE attempts SET left_files=? WHERE id=?",
    "trial_data": TRIAL_DATA,
    "attempt_spend": "UPDATE attempts SET spend=? WHERE id=?",
    "attempt_expected": "UPDATE attempts SET expected_s=? WHERE id=?",
    "trial_ends": END_TRIAL,
    "environments": INSERT_ENVIRONMENT,
    "trial_links": LINK_TRIAL,
    "scores": INSERT_SCORE,
    "events": INSERT_EVENT,
    "progress": INSERT_PROGRESS,
    "decisions": INSERT_DECISION,
    "agent_log": INSERT_AGENT_CALL,
    "campaign_updates": END_CAMPAIGN,
    "run_times": "UPDATE campaigns SET run_s=? WHERE id=?",
    "enqueue_takes": "UPDATE enqueued SET run=?, proposal=? WHERE id=? AND run IS NULL",
    "lineage": "INSERT INTO lineage(trial_id, campaign_id, parent_id, parent_step, member_id,"
               " created_at) VALUES (?, ?, ?, ?, ?, ?)",
}
"""The statement of each kind of change, as :meth:`Batch.changes` names them."""
