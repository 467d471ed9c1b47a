"""The record's schema, in SQLite's dialect: its tables, the summaries (kept by each pass's
commit since schema 20, :mod:`dse.record.sql._tallies`; by triggers before, which the older
migrations still make and schema 20 drops), and what each schema version added
(:data:`MIGRATIONS`: SQLite's :mod:`dse.record.sqlite._migrations` applies them to an older
record; PostgreSQL's schema is translated from these, :mod:`dse.record.postgres._schema`)."""

from __future__ import annotations

from dse.record.sql._rows import ENDED, OPEN, SPEND_KEYS

SCHEMA_VERSION = 22


NEW_TABLES_7 = """
CREATE TABLE IF NOT EXISTS scores (
    id INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    scorer TEXT NOT NULL,
    scorer_version TEXT NOT NULL,
    score REAL NOT NULL,
    baseline_trial INTEGER REFERENCES trials(id),
    created_at REAL NOT NULL,
    invalidation INTEGER REFERENCES invalidations(id)
);
CREATE INDEX IF NOT EXISTS scores_trial ON scores(trial_id);
CREATE INDEX IF NOT EXISTS scores_baseline ON scores(baseline_trial);
CREATE TABLE IF NOT EXISTS invalidations (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    reason TEXT NOT NULL,
    trials INTEGER NOT NULL,
    scores INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS environments (
    digest TEXT PRIMARY KEY,
    python TEXT,
    distributions TEXT NOT NULL
)
"""


NEW_TABLES_9 = """
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    next INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    config_hash TEXT PRIMARY KEY,
    trial_id INTEGER NOT NULL,
    campaign TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS claims_trial ON claims(trial_id)
"""


"""Schema 9: row ids handed out by the record (``counters``: the next free id of ``trials``
and ``attempts``) and the configurations being run (``claims``: config hash → the trial that
runs it and the campaign whose lock says whether its controller lives)."""


NEW_TABLES_10 = """
CREATE TABLE IF NOT EXISTS agent_snapshots (
    campaign_id INTEGER PRIMARY KEY REFERENCES campaigns(id),
    log_id INTEGER NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS trials_proposal ON trials(campaign_id, proposal)
"""


"""Schema 10: each run's latest agent snapshot (its ``snapshot()``, as JSON) and the last
``agent_log`` row it covers: a resume restores it and replays only the calls after it, and
reads the trials those calls name (by proposal)."""


NEW_TABLES_13 = """
CREATE TABLE IF NOT EXISTS progress (
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt INTEGER NOT NULL,
    step INTEGER NOT NULL,
    metrics TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (trial_id, attempt, step)
) WITHOUT ROWID
"""


"""Schema 13: each trial's learning curve, the points its attempts reported as they ran
(``dse.trial.report_progress``: one row per attempt and step; a point read twice — by a
restarted controller — is kept once)."""


NEW_COLUMNS_16 = """
ALTER TABLE trials ADD COLUMN scores TEXT;
ALTER TABLE scores ADD COLUMN scores TEXT
"""


"""Schema 16: a Pareto campaign's score of each objective (a JSON list), on the trial (its
latest) and on each conclusion."""


NEW_COLUMNS_17 = (
    "ALTER TABLE campaigns ADD COLUMN run_s REAL",
    # An older run's time: its span on the wall clock, to its end or its last event.
    "UPDATE campaigns SET run_s = MAX(COALESCE(ended_at, (SELECT MAX(at) FROM events e"
    " WHERE e.campaign_id = campaigns.id), created_at) - created_at, 0) WHERE run_s IS NULL",
)


"""Schema 17: the time controllers drove each run (``campaigns.run_s``, seconds measured on
each controller's monotonic clock, kept at every pass that writes and at least every
:data:`dse.engine._journal.RUN_TIME_EVERY` seconds): what a wall-clock ceiling counts, across a
resume and the campaign's runs."""


NEW_TABLES_18 = """
CREATE TABLE IF NOT EXISTS leases (
    campaign TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token TEXT NOT NULL,
    renewed_at REAL NOT NULL,
    ttl_s REAL NOT NULL
)
"""


"""Schema 18: each campaign's lease (``leases``): the controller that holds it (JSON: host,
pid, its start), a token only it knows, when it last renewed it (on the record's clock) and
for how long a renewal holds. A lease not renewed within its TTL is taken over, on any host;
a controller whose lease was taken fails its next commit and stops."""


NEW_TABLES_19 = """
CREATE TABLE IF NOT EXISTS enqueued (
    id INTEGER PRIMARY KEY,
    campaign TEXT NOT NULL,
    params TEXT NOT NULL,
    source TEXT NOT NULL,
    added_at REAL NOT NULL,
    run INTEGER,
    proposal INTEGER
);
CREATE INDEX IF NOT EXISTS enqueued_waiting ON enqueued(campaign, run, id)
"""

NEW_TABLES_21 = """
CREATE TABLE IF NOT EXISTS lineage (
    trial_id INTEGER PRIMARY KEY REFERENCES trials(id),
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    parent_id INTEGER NOT NULL REFERENCES trials(id),
    parent_step INTEGER NOT NULL,
    member_id INTEGER REFERENCES trials(id),
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS lineage_campaign ON lineage(campaign_id, trial_id);
CREATE INDEX IF NOT EXISTS lineage_parent ON lineage(parent_id)
"""
"""Population-based training: a trial that started from a copy of another's checkpoint (its
parent, at the last step the parent had reported), in the place of the member it replaced."""

NEW_COLUMNS_22 = "ALTER TABLE attempts ADD COLUMN left_files TEXT"
"""Schema 22: where the files an attempt made but its backend left where they were made are
(a JSON document, :attr:`dse.JobStatus.left_files`)."""


"""Schema 19: configurations enqueued for a campaign (``enqueued``: its ``[[enqueue]]`` tables
as a run starts, ``dse enqueue``, ``dse.enqueue``), each run before the agent's proposals by
the first run of the campaign that takes it (``run``, ``proposal``: the proposal number it was
given)."""


NEW_TABLES_14 = """
ALTER TABLE trials ADD COLUMN stop_step INTEGER;
ALTER TABLE agent_log ADD COLUMN stops TEXT;
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt INTEGER NOT NULL,
    rule TEXT NOT NULL,
    rule_version TEXT NOT NULL,
    verdict TEXT NOT NULL,
    rung INTEGER NOT NULL,
    step INTEGER NOT NULL,
    value REAL,
    cutoff REAL,
    peers INTEGER NOT NULL,
    compared TEXT NOT NULL,
    reason TEXT NOT NULL,
    bracket INTEGER,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_trial ON decisions(trial_id);
CREATE INDEX IF NOT EXISTS decisions_run ON decisions(campaign_id, verdict);
CREATE INDEX IF NOT EXISTS trials_stopped ON trials(campaign_id) WHERE status = 'stopped'
"""


"""Schema 14: the decisions of a campaign's stopping rule (``[stopping]``): which trial, at
which rung, compared with which peers, by which rule and version, and what it decided; and
the step a trial stopped at (``trials.stop_step``: its metrics are from that step); and, for an
``observe`` call, the step each stopped trial it told was stopped at (``agent_log.stops``: a
trial promoted since is replayed as it was told)."""


def last_stop(trial: str, column: str, before: str | None = None) -> str:
    """The *column* (``rung`` or ``step``) of the latest stop decision about trial *trial*
    (an SQL expression of its row id; made before decision *before*, if given), else -1."""
    earlier = "" if before is None else f" AND id < {before}"
    return (f"IFNULL((SELECT {column} FROM decisions WHERE trial_id = {trial} AND verdict IN"
            f" ('stop', 'exploit'){earlier} ORDER BY id DESC LIMIT 1), -1)")


def end_key(row: str, status: str, id_row: str | None = None) -> str:
    """The ``stop_totals`` kind, rung and step of trial *row* (``NEW``, ``OLD``, ``t``: its
    ``stop_step``; its id is *id_row*'s) as ended with *status*: a stopped trial's is its
    latest stop's rung and the step it stopped at (``stop_step``, else that stop's)."""
    trial = f"{id_row or row}.id"
    return (f"'ended_' || {status}, CASE WHEN {status} = 'stopped' THEN"
            f" {last_stop(trial, 'rung')} ELSE 0 END, CASE WHEN {status} = 'stopped' THEN"
            f" COALESCE({row}.stop_step, {last_stop(trial, 'step')}) ELSE 0 END")


UPSERT_STOP = (" ON CONFLICT (campaign_id, kind, rung, step) DO UPDATE SET trials = trials +"
                " excluded.trials, " + ", ".join(f"{k} = {k} + excluded.{k}" for k in SPEND_KEYS))


STOP_COLUMNS = "campaign_id, kind, rung, step, trials, wall_s, cpu_s, gpu_s, node_s, money"


def _end_delta(sign: str, campaign: str, trial: str, key: str, when: str = "1 = 1") -> str:
    """Add (*sign* ``+``) or take away (``-``) trial *trial*'s count and its attempts' spend
    at ``stop_totals`` *key* (kind, rung, step), when *when* holds."""
    spend = ", ".join(f"TOTAL(json_extract(spend, '$.{k}')) AS {k}" for k in SPEND_KEYS)
    return (f"INSERT INTO stop_totals({STOP_COLUMNS}) SELECT {campaign}, {key}, {sign}1, "
            + ", ".join(f"{sign}{k}" for k in SPEND_KEYS)
            + f" FROM (SELECT {spend} FROM attempts WHERE trial_id = {trial}) AS s WHERE {when}"
            + UPSERT_STOP)


def ended_trials(runs: str) -> str:
    """Add, whole, the trials that ended stopped or completed of the runs *runs* selects (an
    SQL condition on ``t``), with their attempts' spend (a run's first decision; a
    migration)."""
    spend = ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in SPEND_KEYS)
    return (f"INSERT INTO stop_totals({STOP_COLUMNS}) SELECT t.campaign_id,"
            f" {end_key('t', 't.status')}, COUNT(DISTINCT t.id), {spend} FROM trials t"
            " LEFT JOIN attempts a ON a.trial_id = t.id WHERE t.status IN ('stopped',"
            f" 'completed') AND {runs} GROUP BY 1, 2, 3, 4")


_TRACKED = "EXISTS (SELECT 1 FROM stop_totals WHERE campaign_id = {run})"


"""Whether run ``{run}`` has ``stop_totals`` rows: from its first decision on."""


_STOPPED_NOW = "(SELECT status FROM trials WHERE id = NEW.trial_id) = 'stopped'"


SUMMARIES_15: tuple[str, ...] = (
    # What `dse report` says of early stopping, kept by SQLite as decisions, trials and
    # attempts are written: per run, the decisions by verdict and rung (kind = the verdict,
    # step 0), and the trials that ended stopped (kind 'ended_stopped', by the rung and step
    # of their latest stop) or ran to the end ('ended_completed') with their attempts' spend.
    # A run has rows from its first decision on (its ended trials are added then): a run
    # without a stopping rule costs one index probe per trial end.
    "CREATE TABLE IF NOT EXISTS stop_totals (campaign_id INTEGER NOT NULL, kind TEXT NOT NULL,"
    " rung INTEGER NOT NULL, step INTEGER NOT NULL, trials INTEGER NOT NULL DEFAULT 0, "
    + ", ".join(f"{k} REAL NOT NULL DEFAULT 0" for k in SPEND_KEYS)
    + ", PRIMARY KEY (campaign_id, kind, rung, step)) WITHOUT ROWID",
    # A run's first decision adds its ended trials first, as they stand before it (by a
    # WHEN clause: a condition in the statement would not spare each decision a scan).
    "CREATE TRIGGER IF NOT EXISTS stop_first BEFORE INSERT ON decisions WHEN NOT "
    + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + ended_trials("t.campaign_id = NEW.campaign_id") + "; END",
    # A decision: a stopped trial's latest stop moves it, then the decision is counted.
    "CREATE TRIGGER IF NOT EXISTS stop_decided AFTER INSERT ON decisions BEGIN "
    + _end_delta("-", "NEW.campaign_id", "NEW.trial_id",
                 "'ended_stopped', " + last_stop("NEW.trial_id", "rung", "NEW.id")
                 + ", COALESCE((SELECT stop_step FROM trials WHERE id = NEW.trial_id), "
                 + last_stop("NEW.trial_id", "step", "NEW.id") + ")",
                 f"NEW.verdict = 'stop' AND {_STOPPED_NOW} AND "
                 + _TRACKED.format(run="NEW.campaign_id")) + "; "
    + _end_delta("+", "NEW.campaign_id", "NEW.trial_id", "'ended_stopped', NEW.rung,"
                 " COALESCE((SELECT stop_step FROM trials WHERE id = NEW.trial_id), NEW.step)",
                 f"NEW.verdict = 'stop' AND {_STOPPED_NOW} AND "
                 + _TRACKED.format(run="NEW.campaign_id")) + "; "
    + "INSERT INTO stop_totals(campaign_id, kind, rung, step, trials) VALUES (NEW.campaign_id,"
    " NEW.verdict, NEW.rung, 0, 1) ON CONFLICT (campaign_id, kind, rung, step) DO UPDATE SET"
    " trials = trials + 1; END",
    "CREATE TRIGGER IF NOT EXISTS stop_left AFTER UPDATE OF status, stop_step ON trials WHEN"
    " OLD.status IN ('stopped', 'completed') AND (NEW.status IS NOT OLD.status OR"
    " NEW.stop_step IS NOT OLD.stop_step) AND "
    + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + _end_delta("-", "NEW.campaign_id", "NEW.id", end_key("OLD", "OLD.status", "NEW"))
    + "; END",
    "CREATE TRIGGER IF NOT EXISTS stop_entered AFTER UPDATE OF status, stop_step ON trials WHEN"
    " NEW.status IN ('stopped', 'completed') AND (NEW.status IS NOT OLD.status OR"
    " NEW.stop_step IS NOT OLD.stop_step) AND "
    + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + _end_delta("+", "NEW.campaign_id", "NEW.id", end_key("NEW", "NEW.status")) + "; END",
    "CREATE TRIGGER IF NOT EXISTS stop_inserted AFTER INSERT ON trials WHEN NEW.status IN"
    " ('stopped', 'completed') AND " + _TRACKED.format(run="NEW.campaign_id") + " BEGIN "
    + _end_delta("+", "NEW.campaign_id", "NEW.id", end_key("NEW", "NEW.status")) + "; END",
    "CREATE TRIGGER IF NOT EXISTS stop_spend AFTER UPDATE OF spend ON attempts WHEN EXISTS"
    " (SELECT 1 FROM trials t WHERE t.id = NEW.trial_id AND t.status IN ('stopped',"
    " 'completed') AND " + _TRACKED.format(run="t.campaign_id") + ") BEGIN"
    f" INSERT INTO stop_totals({STOP_COLUMNS}) SELECT t.campaign_id, {end_key('t', 't.status')},"
    " 0, "
    + ", ".join(f"IFNULL(json_extract(NEW.spend, '$.{k}'), 0) -"
                f" IFNULL(json_extract(OLD.spend, '$.{k}'), 0)" for k in SPEND_KEYS)
    + " FROM trials t WHERE t.id = NEW.trial_id" + UPSERT_STOP + "; END",
)


"""The summary of schema 15 (statements that hold ``;``: never split)."""


BACKFILL_15: tuple[str, ...] = (
    "DELETE FROM stop_totals",
    "INSERT INTO stop_totals(campaign_id, kind, rung, step, trials) SELECT campaign_id,"
    " verdict, rung, 0, COUNT(*) FROM decisions GROUP BY 1, 2, 3",
    ended_trials("t.campaign_id IN (SELECT DISTINCT campaign_id FROM decisions)"),
)


def tally_key(row: str) -> str:
    """The ``run_tallies`` key columns of trial *row* (``NEW`` or ``OLD`` in a trigger)."""
    version = f"IFNULL(COALESCE(NULLIF({row}.data_version_read, ''), {row}.data_version), '')"
    mismatch = (f"CASE WHEN {row}.data_version_read IS NOT NULL AND {row}.data_version_read"
                f" <> '' AND {row}.data_version IS NOT NULL AND {row}.data_version <> '' AND"
                f" {row}.data_version_read <> {row}.data_version THEN 1 ELSE 0 END")
    return (f"{row}.campaign_id, {version}, {row}.status, IFNULL({row}.failure, ''),"
            f" CASE WHEN {row}.score IS NOT NULL THEN 1 ELSE 0 END, {mismatch}")


TALLY_COLUMNS = "campaign_id, version, status, failure, scored, mismatched"


SUMMARIES: tuple[str, ...] = (
    # What `dse status` and `dse report` print, kept by SQLite as trials are written (by any
    # controller, `dse invalidate` or a migration alike): the trials of each run by data
    # version, status, failure, whether scored and whether the data read differs; and each
    # run's dispatched trials and summed spend. Reading them costs the same at a million
    # trials as at ten.
    "CREATE TABLE IF NOT EXISTS run_tallies (campaign_id INTEGER NOT NULL, version TEXT NOT"
    " NULL, status TEXT NOT NULL, failure TEXT NOT NULL, scored INTEGER NOT NULL, mismatched"
    " INTEGER NOT NULL, trials INTEGER NOT NULL, first INTEGER NOT NULL,"
    f" PRIMARY KEY ({TALLY_COLUMNS})) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS run_totals (campaign_id INTEGER PRIMARY KEY, dispatched"
    " INTEGER NOT NULL DEFAULT 0, "
    + ", ".join(f"{k} REAL NOT NULL DEFAULT 0" for k in SPEND_KEYS) + ")",
    "CREATE TRIGGER IF NOT EXISTS tally_trial AFTER INSERT ON trials BEGIN"
    f" INSERT INTO run_tallies VALUES ({tally_key('NEW')}, 1, NEW.number)"
    f" ON CONFLICT ({TALLY_COLUMNS}) DO UPDATE SET trials = trials + 1,"
    " first = MIN(first, excluded.first); END",
    "CREATE TRIGGER IF NOT EXISTS tally_change AFTER UPDATE OF status, failure, score,"
    " data_version, data_version_read ON trials"
    f" WHEN ({tally_key('OLD')}) IS NOT ({tally_key('NEW')}) BEGIN"
    " UPDATE run_tallies SET trials = trials - 1"
    f" WHERE ({TALLY_COLUMNS}) = ({tally_key('OLD')});"
    f" INSERT INTO run_tallies VALUES ({tally_key('NEW')}, 1, NEW.number)"
    f" ON CONFLICT ({TALLY_COLUMNS}) DO UPDATE SET trials = trials + 1,"
    " first = MIN(first, excluded.first); END",
    "CREATE TRIGGER IF NOT EXISTS total_dispatched AFTER INSERT ON attempts"
    " WHEN NEW.attempt = 1 BEGIN"
    " INSERT INTO run_totals(campaign_id, dispatched)"
    " SELECT campaign_id, 1 FROM trials WHERE id = NEW.trial_id"
    " ON CONFLICT (campaign_id) DO UPDATE SET dispatched = dispatched + 1; END",
    "CREATE TRIGGER IF NOT EXISTS total_spend AFTER UPDATE OF spend ON attempts"
    " WHEN NEW.spend IS NOT NULL BEGIN"
    f" INSERT INTO run_totals(campaign_id, {', '.join(SPEND_KEYS)}) SELECT campaign_id, "
    + ", ".join(f"IFNULL(json_extract(NEW.spend, '$.{k}'), 0) -"
                f" IFNULL(json_extract(OLD.spend, '$.{k}'), 0)" for k in SPEND_KEYS)
    + " FROM trials WHERE id = NEW.trial_id ON CONFLICT (campaign_id) DO UPDATE SET "
    + ", ".join(f"{k} = {k} + excluded.{k}" for k in SPEND_KEYS) + "; END",
    # Indexes of what a report lists: flagged, cache hits, mismatched trials, the best.
    "CREATE INDEX IF NOT EXISTS trials_invalid ON trials(campaign_id)"
    " WHERE invalidation IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS scores_invalid ON scores(trial_id)"
    " WHERE invalidation IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS trials_cache_of ON trials(campaign_id, number)"
    " WHERE cache_of IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS trials_score ON trials(campaign_id, score, number)"
    " WHERE score IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS trials_replaces ON trials(replaces)"
    " WHERE replaces IS NOT NULL",
)


"""The summaries and indexes of schema 11 (statements that hold ``;``: never split)."""


BACKFILL_11: tuple[str, ...] = (
    "DELETE FROM run_tallies",  # rebuilt whole from the rows (a record may hold some)
    "DELETE FROM run_totals",
    f"INSERT INTO run_tallies SELECT {tally_key('trials')}, COUNT(*), MIN(number)"
    " FROM trials GROUP BY 1, 2, 3, 4, 5, 6",
    f"INSERT INTO run_totals(campaign_id, dispatched, {', '.join(SPEND_KEYS)})"
    " SELECT t.campaign_id, SUM(CASE WHEN a.attempt = 1 AND t.cache_of IS NULL THEN 1 ELSE 0"
    " END), "
    + ", ".join(f"TOTAL(json_extract(a.spend, '$.{k}'))" for k in SPEND_KEYS)
    + " FROM attempts a JOIN trials t ON t.id = a.trial_id GROUP BY t.campaign_id",
)


def attempt_seconds(row: str) -> str:
    """The seconds attempt *row* (``NEW`` or ``OLD`` in a trigger) ran, once started and
    ended; else 0."""
    return (f"(CASE WHEN {row}.started_at IS NOT NULL AND {row}.ended_at IS NOT NULL"
            f" THEN MAX({row}.ended_at - {row}.started_at, 0) ELSE 0 END)")


def made_dir(row: str) -> str:
    """Whether trial *row* (``NEW`` or ``OLD``) was given a directory (not a cache hit)."""
    return (f"(CASE WHEN {row}.cache_of IS NULL AND IFNULL({row}.trial_dir, '') != ''"
            " THEN 1 ELSE 0 END)")


SUMMARIES_12: tuple[str, ...] = (
    # What a resume reads besides the trials it rebuilds, kept like schema 11's summaries:
    # each run's attempt seconds, trials given a directory and latest wave; the trials
    # still open; the ends of the attempts a duration estimate learns from. A resume then
    # reads the same few rows at a million trials as at ten.
    "ALTER TABLE agent_snapshots ADD COLUMN unobserved TEXT",
    "ALTER TABLE run_totals ADD COLUMN attempt_s REAL NOT NULL DEFAULT 0",
    "ALTER TABLE run_totals ADD COLUMN trial_dirs INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE run_totals ADD COLUMN wave INTEGER NOT NULL DEFAULT 0",
    "CREATE TRIGGER IF NOT EXISTS total_trial AFTER INSERT ON trials BEGIN"
    " INSERT INTO run_totals(campaign_id, trial_dirs, wave)"
    f" VALUES (NEW.campaign_id, {made_dir('NEW')}, NEW.wave)"
    " ON CONFLICT (campaign_id) DO UPDATE SET trial_dirs = trial_dirs + excluded.trial_dirs,"
    " wave = MAX(wave, excluded.wave); END",
    "CREATE TRIGGER IF NOT EXISTS total_dirs AFTER UPDATE OF cache_of, trial_dir ON trials"
    f" WHEN {made_dir('OLD')} IS NOT {made_dir('NEW')} BEGIN"
    " INSERT INTO run_totals(campaign_id, trial_dirs)"
    f" VALUES (NEW.campaign_id, {made_dir('NEW')} - {made_dir('OLD')})"
    " ON CONFLICT (campaign_id) DO UPDATE SET trial_dirs = trial_dirs + excluded.trial_dirs;"
    " END",
    "CREATE TRIGGER IF NOT EXISTS total_seconds AFTER UPDATE OF started_at, ended_at"
    f" ON attempts WHEN {attempt_seconds('OLD')} != {attempt_seconds('NEW')} BEGIN"
    " INSERT INTO run_totals(campaign_id, attempt_s)"
    f" SELECT campaign_id, {attempt_seconds('NEW')} - {attempt_seconds('OLD')} FROM trials"
    " WHERE id = NEW.trial_id"
    " ON CONFLICT (campaign_id) DO UPDATE SET attempt_s = attempt_s + excluded.attempt_s; END",
    f"CREATE INDEX IF NOT EXISTS trials_open ON trials(campaign_id) WHERE {OPEN}",
    "CREATE INDEX IF NOT EXISTS attempts_ended ON attempts(ended_at)"
    f" WHERE {ENDED.replace('a.', '')}",
)


"""The summaries and indexes of schema 12 (statements that hold ``;``: never split)."""


BACKFILL_12: tuple[str, ...] = (
    "INSERT OR IGNORE INTO run_totals(campaign_id) SELECT DISTINCT campaign_id FROM trials",
    f"UPDATE run_totals SET trial_dirs = (SELECT COUNT(*) FROM trials t WHERE"
    f" t.campaign_id = run_totals.campaign_id AND {made_dir('t')} = 1),"
    " wave = (SELECT COALESCE(MAX(wave), 0) FROM trials t"
    " WHERE t.campaign_id = run_totals.campaign_id),"
    f" attempt_s = (SELECT TOTAL({attempt_seconds('a')}) FROM attempts a JOIN trials t"
    " ON t.id = a.trial_id WHERE t.campaign_id = run_totals.campaign_id)",
)


REBUILD = (*BACKFILL_11, *BACKFILL_12, *BACKFILL_15)
"""Every summary, built again from the rows (a summary of a new schema adds its backfill
here)."""


_SUMMARY_DDL = (*SUMMARIES, *SUMMARIES_12, *SUMMARIES_15)


SUMMARY_TABLES = tuple(s for s in _SUMMARY_DDL if not s.startswith("CREATE TRIGGER"))
"""The summaries' tables, columns and indexes, as a new record makes them (no triggers: each
pass's commit keeps the summaries, :mod:`dse.record.sql._tallies`)."""


DROP_TRIGGERS_20 = tuple(f"DROP TRIGGER IF EXISTS {s.split()[5]}" for s in _SUMMARY_DDL
                         if s.startswith("CREATE TRIGGER"))
"""Schema 20: the summaries are kept by each pass's commit, from the rows it changed (one
upsert per summary and pass instead of several trigger statements per trial); the triggers
of schemas 11, 12 and 15 go, and the summaries are rebuilt from the rows."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS campaigns (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    source TEXT,
    spec TEXT NOT NULL,
    agent TEXT NOT NULL,
    backend TEXT NOT NULL,
    mode TEXT NOT NULL,
    max_parallelism INTEGER NOT NULL,
    status TEXT NOT NULL,
    end_reason TEXT,
    created_at REAL NOT NULL,
    ended_at REAL,
    run_s REAL
);
CREATE INDEX IF NOT EXISTS campaigns_name ON campaigns(name);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    number INTEGER NOT NULL,
    proposal INTEGER NOT NULL,
    wave INTEGER NOT NULL,
    config_hash TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    failure TEXT,
    message TEXT,
    metrics TEXT,
    score REAL,
    cache_of INTEGER REFERENCES trials(id),
    trial_dir TEXT,
    data_version TEXT,
    data_version_read TEXT,
    dependencies TEXT,
    replaces INTEGER REFERENCES trials(id),
    invalidation INTEGER REFERENCES invalidations(id),
    created_at REAL NOT NULL,
    ended_at REAL,
    UNIQUE (campaign_id, number)
);
CREATE INDEX IF NOT EXISTS trials_hash ON trials(config_hash);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    attempt INTEGER NOT NULL,
    backend TEXT NOT NULL,
    job_id TEXT,
    state TEXT NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    node TEXT,
    reason TEXT,
    peak_rss_kb INTEGER,
    resumed INTEGER NOT NULL DEFAULT 0,
    work_lost_s REAL,
    usage TEXT,
    spend TEXT,
    expected_s REAL,
    submitted_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    UNIQUE (trial_id, attempt)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    trial_id INTEGER REFERENCES trials(id),
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT
);
CREATE INDEX IF NOT EXISTS events_campaign ON events(campaign_id, kind);
CREATE TABLE IF NOT EXISTS agent_log (
    id INTEGER PRIMARY KEY,
    campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
    kind TEXT NOT NULL,
    n INTEGER,
    proposals TEXT NOT NULL,
    in_flight TEXT
);
CREATE INDEX IF NOT EXISTS agent_log_campaign ON agent_log(campaign_id, id);
""" + ";".join((NEW_TABLES_7, NEW_TABLES_9, NEW_TABLES_10, NEW_TABLES_13, NEW_TABLES_14,
                NEW_COLUMNS_16, NEW_TABLES_18, NEW_TABLES_19, NEW_TABLES_21,
                NEW_COLUMNS_22))


MIGRATIONS: dict[int, tuple[str, ...]] = {
    3: ("ALTER TABLE attempts ADD COLUMN usage TEXT",),
    4: ("ALTER TABLE attempts ADD COLUMN spend TEXT",),
    5: ("ALTER TABLE trials ADD COLUMN data_version TEXT",
        "ALTER TABLE trials ADD COLUMN data_version_read TEXT"),
    6: ("ALTER TABLE trials ADD COLUMN dependencies TEXT",
        "ALTER TABLE trials ADD COLUMN replaces INTEGER REFERENCES trials(id)",
        "ALTER TABLE trials ADD COLUMN invalidation INTEGER REFERENCES invalidations(id)",
        *NEW_TABLES_7.split(";")),
    7: ("ALTER TABLE attempts ADD COLUMN expected_s REAL",),
    8: (*NEW_TABLES_9.split(";"),
        "INSERT OR IGNORE INTO counters(name, next)"
        " SELECT 'trials', COALESCE(MAX(id), 0) + 1 FROM trials",
        "INSERT OR IGNORE INTO counters(name, next)"
        " SELECT 'attempts', COALESCE(MAX(id), 0) + 1 FROM attempts"),
    9: tuple(NEW_TABLES_10.split(";")),
    10: (*SUMMARIES, *BACKFILL_11),
    11: (*SUMMARIES_12, *BACKFILL_12),
    12: tuple(NEW_TABLES_13.split(";")),
    13: tuple(NEW_TABLES_14.split(";")),
    14: (*SUMMARIES_15, *BACKFILL_15),
    15: tuple(NEW_COLUMNS_16.split(";")),
    16: NEW_COLUMNS_17,
    17: tuple(NEW_TABLES_18.split(";")),
    18: tuple(NEW_TABLES_19.split(";")),
    19: (*DROP_TRIGGERS_20, *REBUILD),
    20: tuple(NEW_TABLES_21.split(";")),
    21: (NEW_COLUMNS_22,),
}


"""Statements that take a record from schema version *key* to *key* + 1."""


OLDEST_SCHEMA = min(MIGRATIONS)


"""The oldest schema version this dse migrates. Every step leaves what a record has already
as it is (a column there, a table there, a summary rebuilt whole), so a record whose version
cannot be read (``dse doctor --salvage``) is migrated from here."""

