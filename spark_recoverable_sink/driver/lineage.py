"""What a batch DataFrame reads, per Spark partition, and whether rows move between partitions on the way.

Asked on the driver, of classic PySpark only (py4j), without running any
Spark job: :func:`describe` compiles (once per JVM, with Janino, the compiler
Spark's own code generation uses and every Spark release ships) a small Java
class that walks, in one py4j call,

1. the DataFrame's executed plan and, inside ``foreachBatch``, the batch's
   own ``IncrementalExecution`` (found by this thread's SQL execution id;
   the batch DataFrame is a ``LogicalRDD`` over its RDD): the exchanges, by
   kind (``HashPartitioning``, ``RoundRobinPartitioning``, ...);
2. the RDD lineage of ``df.queryExecution.toRdd`` (only when building it runs
   no job: no adaptive execution, broadcast, range exchange or subquery in
   the DataFrame's own plan), giving for each final partition the scan
   partitions it reads through narrow dependencies, or the shuffle it reads;
3. each scan partition's input: a Kafka offset range (``topic``,
   ``partition``, ``fromOffset``, ``untilOffset``: Spark's Kafka source, the
   micro-batch and the batch one) or a file split (path, start, length).

Never read: the Kafka parameters an input partition carries (they can hold
secrets): only named accessors, class names and numbers leave the JVM, and
errors by their class name only. Measured (research for issue 60): 0.3 ms
per call at 4 partitions, 2.6 ms at 200; the first call compiles the class
(0.2-0.5 s). On Spark Connect there is no py4j: :func:`describe` gives ``None``.

Where it runs: the driver. Nothing here pickles.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["Leaf", "Lineage", "describe", "NARROW", "SHUFFLE", "OTHER"]

log = logging.getLogger("spark_recoverable_sink.sink")

NARROW, SHUFFLE, OTHER = "narrow", "shuffle", "other"
#: Scan inputs whose rows come in the same order every time the partition is read (a re-run, a task's retry).
_ORDERED = ("KafkaBatchInputPartition", "KafkaSourceRDDPartition", "FilePartition", "ParallelCollectionPartition")


@dataclass(frozen=True)
class Leaf:
    """The scan partition one final partition reads: ``identity`` names its rows for good (a Kafka range's
    topic, partition and first offset; a file split's paths, starts and lengths), ``None`` where the input has no
    such name; ``ordered``: its rows come in the same order on every read."""

    identity: str | None
    ordered: bool


@dataclass(frozen=True)
class Lineage:
    """How a DataFrame's partitions get their rows.

    ``path``: :data:`NARROW` (each partition reads exactly one scan partition, none read twice: ``leaves``),
    :data:`SHUFFLE` (each partition ``i`` reads output partition ``i`` of one exchange, ``exchange`` its kind:
    ``hash``, ``single``, ``round-robin``, ``range``, or ``adaptive`` when adaptive execution reads it), or
    :data:`OTHER` (anything else, or not known without running a job).
    """

    path: str
    partitions: int
    leaves: tuple[Leaf, ...] = ()
    exchange: str = ""


JAVA_SOURCE = r"""
private static final Class[] NO_TYPES = new Class[0];
private static final Object[] NO_ARGS = new Object[0];

private static final Object MISSING = new Object();
private static final java.util.concurrent.ConcurrentHashMap METHODS = new java.util.concurrent.ConcurrentHashMap();

/** The public no-argument method ``name`` of o's class, or null; lookups cached per (class, name). */
private static java.lang.reflect.Method method(Object o, String name) {
    Class c = o.getClass();
    String key = c.getName() + "@" + System.identityHashCode(c) + "#" + name;
    Object got = METHODS.get(key);
    if (got == null) {
        try {
            java.lang.reflect.Method m = c.getMethod(name, NO_TYPES);
            try { m.setAccessible(true); } catch (RuntimeException e) { }
            got = m;
        } catch (NoSuchMethodException e) {
            got = MISSING;
        }
        METHODS.put(key, got);
    }
    return got == MISSING ? null : (java.lang.reflect.Method) got;
}

private static Object call(Object o, String name) throws Exception {
    java.lang.reflect.Method m = method(o, name);
    if (m == null) throw new NoSuchMethodException(o.getClass().getName() + "." + name);
    return m.invoke(o, NO_ARGS);
}

private static Object callOrNull(Object o, String name) {
    try {
        java.lang.reflect.Method m = method(o, name);
        return m == null ? null : m.invoke(o, NO_ARGS);
    } catch (Throwable t) {
        return null;
    }
}

/** ASCII only, no tab/newline: other characters (and the backslash) as backslash, 'u', 4 hex digits. */
private static String clean(Object o) {
    String s = String.valueOf(o);
    StringBuilder b = null;
    for (int i = 0; i < s.length(); i++) {
        char c = s.charAt(i);
        boolean plain = c >= 0x20 && c < 0x7f && c != '\\';
        if (b == null) {
            if (plain) continue;
            b = new StringBuilder(s.length() + 16);
            b.append(s, 0, i);
        }
        if (plain) b.append(c);
        else {
            String h = Integer.toHexString(c);
            b.append('\\').append('u');
            for (int k = h.length(); k < 4; k++) b.append('0');
            b.append(h);
        }
    }
    return b == null ? s : b.toString();
}

/** Elements of a Scala Seq/Option/Iterable, a Java array or collection. */
private static java.util.List elements(Object o) {
    java.util.ArrayList out = new java.util.ArrayList();
    if (o == null) return out;
    if (o instanceof scala.Option) {
        scala.Option opt = (scala.Option) o;
        if (opt.isDefined()) out.add(opt.get());
    } else if (o instanceof scala.collection.Iterable) {
        scala.collection.Iterator it = ((scala.collection.Iterable) o).iterator();
        while (it.hasNext()) out.add(it.next());
    } else if (o instanceof Object[]) {
        Object[] a = (Object[]) o;
        for (int i = 0; i < a.length; i++) out.add(a[i]);
    } else if (o instanceof java.util.Collection) {
        out.addAll((java.util.Collection) o);
    }
    return out;
}

// ---------------------------------------------------------------- physical plan

private void walkPlan(Object node, String scope, int depth, StringBuilder sb, java.util.List scans) {
    if (node == null || depth > 200) return;
    String name = node.getClass().getSimpleName();
    String detail = "";
    Object next = null;
    if (name.equals("AdaptiveSparkPlanExec")) {
        detail = "final=" + callOrNull(node, "isFinalPlan");
        next = callOrNull(node, "executedPlan");
    } else if (name.endsWith("QueryStageExec") || name.equals("ResultQueryStageExec")) {
        next = callOrNull(node, "plan");
    } else if (name.equals("ReusedExchangeExec")) {
        next = callOrNull(node, "child");
    } else if (name.indexOf("Exchange") >= 0) {
        Object p = callOrNull(node, "outputPartitioning");
        Object origin = callOrNull(node, "shuffleOrigin");
        if (p != null) {
            detail = p.getClass().getSimpleName() + "\t" + callOrNull(p, "numPartitions") + "\t"
                + (origin == null ? "" : origin.getClass().getSimpleName()) + "\t" + clean(p);
        }
    } else if (name.equals("CoalesceExec")) {
        detail = String.valueOf(callOrNull(node, "numPartitions"));
    } else if (name.equals("RDDScanExec")) {
        Object rdd = callOrNull(node, "rdd");
        detail = rdd == null ? "" : String.valueOf(((org.apache.spark.rdd.RDD) rdd).id());
        scans.add(node);
    } else if (name.equals("AQEShuffleReadExec")) {
        detail = "specs=" + elements(callOrNull(node, "partitionSpecs")).size();
    } else if (name.endsWith("ScanExec") || name.endsWith("ScanExecBase")) {
        scans.add(node);
    }
    sb.append("X\t").append(scope).append('\t').append(depth).append('\t').append(name);
    if (detail.length() > 0) sb.append('\t').append(detail);
    sb.append('\n');
    int subqueries = elements(callOrNull(node, "subqueries")).size();   // expression subqueries run on execute()
    if (subqueries > 0) {
        sb.append("X\t").append(scope).append('\t').append(depth + 1).append("\tSubqueries\t").append(subqueries)
          .append('\n');
    }
    if (next != null) {
        walkPlan(next, scope, depth + 1, sb, scans);
        return;
    }
    java.util.List kids = elements(callOrNull(node, "children"));
    for (int i = 0; i < kids.size(); i++) walkPlan(kids.get(i), scope, depth + 1, sb, scans);
}

/**
 * Whether building df's RDD (qe.toRdd) could run a job: adaptive execution (runs its stages), a broadcast
 * (collects its side), a range exchange (samples its input), a subquery (runs it). A hash / round-robin /
 * single-partition ShuffleExchangeExec only creates its ShuffledRowRDD (and registers the shuffle).
 */
private static boolean unsafeToExecute(String planLines) {
    String[] lines = planLines.split("\n");
    for (int i = 0; i < lines.length; i++) {
        String[] f = lines[i].split("\t");
        if (f.length < 4 || !f[0].equals("X") || !f[1].equals("df")) continue;
        String n = f[3];
        if (n.equals("AdaptiveSparkPlanExec") || n.indexOf("Subquer") >= 0 || n.endsWith("QueryStageExec")
            || n.equals("BroadcastExchangeExec")) return true;
        if (n.indexOf("Exchange") >= 0 && !n.equals("ReusedExchangeExec")) {
            String kind = f.length > 4 ? f[4] : "";
            if (!(kind.equals("HashPartitioning") || kind.equals("RoundRobinPartitioning")
                  || kind.startsWith("SinglePartition"))) return true;
        }
        if (n.equals("ReusedExchangeExec")) return true;
    }
    return false;
}

// ---------------------------------------------------------------- RDD lineage

private java.util.Map leafRdds;      // rdd id -> RDD with no dependencies
private java.util.Map shuffleRdds;   // shuffle id -> map-side RDD
private java.util.Set otherDeps;     // class names of dependencies neither narrow nor shuffle
private java.util.Set rddClasses;    // class names of every RDD met

private void leaves(org.apache.spark.rdd.RDD rdd, int p, java.util.Set refs, java.util.Set shuffles, int depth) {
    if (depth > 500) { refs.add("?deep"); return; }
    rddClasses.add(rdd.getClass().getSimpleName());
    java.util.List deps = elements(rdd.dependencies());
    if (deps.isEmpty()) {
        leafRdds.put(Integer.valueOf(rdd.id()), rdd);
        refs.add(rdd.id() + ":" + p);
        return;
    }
    for (int k = 0; k < deps.size(); k++) {
        Object d = deps.get(k);
        if (d instanceof org.apache.spark.ShuffleDependency) {
            org.apache.spark.ShuffleDependency sd = (org.apache.spark.ShuffleDependency) d;
            Integer sid = Integer.valueOf(sd.shuffleId());
            shuffles.add(sid);
            if (!shuffleRdds.containsKey(sid)) shuffleRdds.put(sid, sd.rdd());
        } else if (d instanceof org.apache.spark.OneToOneDependency) {
            leaves(((org.apache.spark.Dependency) d).rdd(), p, refs, shuffles, depth + 1);
        } else if (d instanceof org.apache.spark.NarrowDependency) {
            org.apache.spark.NarrowDependency nd = (org.apache.spark.NarrowDependency) d;
            java.util.List ps = elements(nd.getParents(p));
            for (int j = 0; j < ps.size(); j++) {
                leaves(nd.rdd(), ((Integer) ps.get(j)).intValue(), refs, shuffles, depth + 1);
            }
        } else {
            otherDeps.add(d.getClass().getName());
            refs.add("?dep");
        }
    }
}

private static String join(java.util.Collection c) {
    StringBuilder sb = new StringBuilder();
    java.util.Iterator it = c.iterator();
    while (it.hasNext()) {
        if (sb.length() > 0) sb.append(',');
        sb.append(it.next());
    }
    return sb.toString();
}

/** Every leaf partition a shuffle's map side reads (through further shuffles too). */
private void shuffleLines(StringBuilder sb) {
    java.util.Set done = new java.util.HashSet();
    boolean more = true;
    while (more) {
        more = false;
        java.util.List ids = new java.util.ArrayList(shuffleRdds.keySet());
        for (int k = 0; k < ids.size(); k++) {
            Object sid = ids.get(k);
            if (done.contains(sid)) continue;
            done.add(sid);
            more = true;
            org.apache.spark.rdd.RDD m = (org.apache.spark.rdd.RDD) shuffleRdds.get(sid);
            java.util.Set refs = new java.util.TreeSet();
            java.util.Set nested = new java.util.TreeSet();
            int n = m.partitions().length;
            for (int p = 0; p < n; p++) leaves(m, p, refs, nested, 0);
            sb.append("S\t").append(sid).append('\t').append(join(refs)).append('\t').append(join(nested)).append('\n');
        }
    }
}

// ---------------------------------------------------------------- scan partitions

private static void kafkaRange(Object holder, int leaf, int p, StringBuilder sb) throws Exception {
    Object r = call(holder, "offsetRange");   // KafkaOffsetRange: never toString'ed, only its fields
    Object tp = call(r, "topicPartition");
    sb.append("K\t").append(leaf).append('\t').append(p).append('\t').append(clean(call(tp, "topic"))).append('\t')
      .append(call(tp, "partition")).append('\t').append(call(r, "fromOffset")).append('\t')
      .append(call(r, "untilOffset")).append('\n');
}

private static void files(Object holder, int leaf, int p, StringBuilder sb) throws Exception {
    java.util.List fs = elements(call(holder, "files"));
    for (int i = 0; i < fs.size(); i++) {
        Object f = fs.get(i);
        sb.append("F\t").append(leaf).append('\t').append(p).append('\t').append(call(f, "start")).append('\t')
          .append(call(f, "length")).append('\t').append(clean(call(f, "filePath"))).append('\n');
    }
}

private static void describeInput(Object ip, int leaf, int p, StringBuilder sb) throws Exception {
    if (method(ip, "offsetRange") != null) kafkaRange(ip, leaf, p, sb);
    else if (method(ip, "files") != null) files(ip, leaf, p, sb);
    else sb.append("U\t").append(leaf).append('\t').append(p).append('\t').append(ip.getClass().getName()).append('\n');
}

private static void leafLines(org.apache.spark.rdd.RDD rdd, StringBuilder sb) throws Exception {
    org.apache.spark.Partition[] parts = rdd.partitions();
    int id = rdd.id();
    sb.append("L\t").append(id).append('\t').append(rdd.getClass().getName()).append('\t').append(parts.length).append('\n');
    for (int p = 0; p < parts.length; p++) {
        Object part = parts[p];
        if (method(part, "inputPartition") != null) {            // Spark 4.2: Option[InputPartition]
            java.util.List ips = elements(call(part, "inputPartition"));
            for (int i = 0; i < ips.size(); i++) describeInput(ips.get(i), id, p, sb);
        } else if (method(part, "inputPartitions") != null) {    // Spark 3.3 - 4.1: Seq[InputPartition]
            java.util.List ips = elements(call(part, "inputPartitions"));
            for (int i = 0; i < ips.size(); i++) describeInput(ips.get(i), id, p, sb);
        } else if (method(part, "offsetRange") != null) {        // DSv1 KafkaSourceRDDPartition
            kafkaRange(part, id, p, sb);
        } else if (method(part, "files") != null) {              // FileScanRDD's FilePartition
            files(part, id, p, sb);
        }
    }
}

/** RDD of a scan node of a plan whose own RDD is not built (exchange / AQE in df's plan). */
private static org.apache.spark.rdd.RDD scanRdd(Object node) {
    String n = node.getClass().getSimpleName();
    Object r = null;
    if (n.equals("RDDScanExec") || n.equals("RowDataSourceScanExec")) r = callOrNull(node, "rdd");
    else r = callOrNull(node, "inputRDD");
    return (r instanceof org.apache.spark.rdd.RDD) ? (org.apache.spark.rdd.RDD) r : null;
}

// ---------------------------------------------------------------- matching the batch's execution

private static String names(Object attributes) {
    java.util.List as = elements(attributes);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < as.size(); i++) sb.append(callOrNull(as.get(i), "name")).append(',');
    return sb.toString();
}

/** qe.toRdd if it was already built, else null (never builds it: that could run jobs). */
private static org.apache.spark.rdd.RDD builtRdd(Object qe) {
    Class c = org.apache.spark.sql.execution.QueryExecution.class;
    try {                                   // Spark 3.x: a Scala lazy val, its field null until computed
        java.lang.reflect.Field f = c.getDeclaredField("toRdd");
        f.setAccessible(true);
        Object v = f.get(qe);
        return v instanceof org.apache.spark.rdd.RDD ? (org.apache.spark.rdd.RDD) v : null;
    } catch (Throwable t) { }
    try {                                   // Spark 4.x: LazyTry lazyToRdd, its lazy field tryT null until computed
        java.lang.reflect.Field f = c.getDeclaredField("lazyToRdd");
        f.setAccessible(true);
        Object lazy = f.get(qe);
        java.lang.reflect.Field t = lazy.getClass().getDeclaredField("tryT");
        t.setAccessible(true);
        Object tried = t.get(lazy);
        if (tried instanceof scala.util.Success) {
            Object v = ((scala.util.Success) tried).value();
            return v instanceof org.apache.spark.rdd.RDD ? (org.apache.spark.rdd.RDD) v : null;
        }
    } catch (Throwable t) { }
    return null;
}

// ---------------------------------------------------------------- entry point

/**
 * The answer, as one String when py4j sends it in one write, else as String[] chunks that each are: py4j writes
 * an answer through an 8 KiB buffer, and an answer above it leaves in two TCP writes, the second held by Nagle's
 * algorithm until the Python side's delayed ACK, 40 ms later (measured: 0.3 ms at 8,150 characters, 44 ms at
 * 8,200). The text is ASCII; py4j escapes newlines and backslashes (2 characters each): counted.
 */
public Object apply(Object dataset) {
    String text = new InputRangesProbe().run(dataset);   // per-call state lives in a fresh instance: thread-safe
    final int limit = 7600;
    int escaped = 0;
    for (int i = 0; i < text.length(); i++) {
        char c = text.charAt(i);
        escaped += (c == '\n' || c == '\\' || c == '\r') ? 2 : 1;
    }
    if (escaped <= limit) return text;
    java.util.ArrayList chunks = new java.util.ArrayList();
    int start = 0, size = 0;
    for (int i = 0; i < text.length(); i++) {
        char c = text.charAt(i);
        int w = (c == '\n' || c == '\\' || c == '\r') ? 2 : 1;
        if (size + w > limit) {
            chunks.add(text.substring(start, i));
            start = i;
            size = 0;
        }
        size += w;
    }
    chunks.add(text.substring(start));
    return chunks.toArray(new String[chunks.size()]);
}

public String run(Object dataset) {
    StringBuilder sb = new StringBuilder();
    leafRdds = new java.util.TreeMap();
    shuffleRdds = new java.util.TreeMap();
    otherDeps = new java.util.TreeSet();
    rddClasses = new java.util.TreeSet();
    try {
        org.apache.spark.sql.execution.QueryExecution qe =
            (org.apache.spark.sql.execution.QueryExecution) call(dataset, "queryExecution");
        org.apache.spark.sql.execution.SparkPlan plan = qe.executedPlan();
        StringBuilder planSb = new StringBuilder();
        java.util.List scans = new java.util.ArrayList();
        walkPlan(plan, "df", 0, planSb, scans);
        sb.append(planSb);
        String dfOutput = String.valueOf(plan.output());

        // Inside foreachBatch: the batch's IncrementalExecution, through this thread's SQL execution id.
        org.apache.spark.SparkContext sc = org.apache.spark.SparkContext.getOrCreate();
        String eid = sc.getLocalProperty("spark.sql.execution.id");
        String qid = sc.getLocalProperty("sql.streaming.queryId");
        for (int s = 0; s < scans.size() && eid != null; s++) {
            Object scan = scans.get(s);
            if (!scan.getClass().getSimpleName().equals("RDDScanExec")) continue;
            org.apache.spark.sql.execution.QueryExecution up =
                org.apache.spark.sql.execution.SQLExecution.getQueryExecution(Long.parseLong(eid));
            if (up == null || up == qe) break;
            // ForeachBatchSink's LogicalRDD wraps exactly up.toRdd: compare RDD ids when up's RDD is built (never
            // building it here); else compare column names (DSv1 sources re-alias the batch's attributes).
            org.apache.spark.rdd.RDD upRdd = builtRdd(up);
            Object scanRdd = callOrNull(scan, "rdd");
            String how = "none";
            org.apache.spark.sql.execution.SparkPlan upPlan = up.executedPlan();
            if (upRdd != null && scanRdd instanceof org.apache.spark.rdd.RDD) {
                how = upRdd.id() == ((org.apache.spark.rdd.RDD) scanRdd).id() ? "rdd" : "none";
            } else if (names(upPlan.output()).equals(names(callOrNull(scan, "output")))) {
                how = "names";
            }
            sb.append("Q\t").append(up.getClass().getSimpleName()).append('\t').append(how).append('\t')
              .append(qid != null).append('\n');
            if (!how.equals("none")) walkPlan(upPlan, "up", 0, sb, new java.util.ArrayList());
            break;
        }

        if (!unsafeToExecute(planSb.toString())) {
            org.apache.spark.rdd.RDD rdd = qe.toRdd();
            int n = rdd.partitions().length;
            sb.append("N\t").append(n).append('\t').append(rdd.id()).append('\n');
            for (int p = 0; p < n; p++) {
                java.util.Set refs = new java.util.TreeSet();
                java.util.Set shuffles = new java.util.TreeSet();
                leaves(rdd, p, refs, shuffles, 0);
                sb.append("P\t").append(p).append('\t').append(join(refs)).append('\t').append(join(shuffles)).append('\n');
            }
        } else {
            // Not built: every scan's partitions, all of them possibly feeding every final partition.
            sb.append("N\t-1\t-1\n");
            java.util.Set refs = new java.util.TreeSet();
            java.util.Set nested = new java.util.TreeSet();
            for (int s = 0; s < scans.size(); s++) {
                org.apache.spark.rdd.RDD r = scanRdd(scans.get(s));
                if (r == null) { refs.add("?scan"); continue; }
                int n = r.partitions().length;
                for (int p = 0; p < n; p++) leaves(r, p, refs, nested, 0);
            }
            sb.append("A\t").append(join(refs)).append('\t').append(join(nested)).append('\n');
        }
        shuffleLines(sb);
        java.util.Iterator it = leafRdds.values().iterator();
        while (it.hasNext()) leafLines((org.apache.spark.rdd.RDD) it.next(), sb);
        sb.append("R\t").append(join(rddClasses)).append('\n');
        if (!otherDeps.isEmpty()) sb.append("D\t").append(join(otherDeps)).append('\n');
    } catch (Throwable t) {
        Throwable c = t;
        while (c instanceof java.lang.reflect.InvocationTargetException && c.getCause() != null) c = c.getCause();
        sb.append("E\t").append(c.getClass().getName()).append('\n');   // class only: a message might quote values
    }
    return sb.toString();
}
"""

_LOCK = threading.Lock()
_COMPILED: dict[int, Any] = {}  # id(py4j gateway) -> the compiled java.util.function.Function
_KIND = {"HashPartitioning": "hash", "CoalescedHashPartitioning": "hash", "RoundRobinPartitioning": "round-robin",
         "RangePartitioning": "range", "SinglePartition$": "single", "SinglePartition": "single"}
_UNESCAPE = re.compile(r"\\u([0-9a-f]{4})")


def _function(df: Any) -> Any:
    gateway = df.sparkSession.sparkContext._gateway
    fn = _COMPILED.get(id(gateway))
    if fn is not None:
        return fn
    with _LOCK:
        fn = _COMPILED.get(id(gateway))
        if fn is None:
            jvm = df.sparkSession._jvm
            ev = jvm.org.codehaus.janino.ClassBodyEvaluator()
            ev.setParentClassLoader(jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader())
            ifaces = gateway.new_array(jvm.java.lang.Class, 1)
            ifaces[0] = jvm.java.lang.Class.forName("java.util.function.Function")
            ev.setImplementedInterfaces(ifaces)
            ev.setClassName("rks.InputRangesProbe")
            ev.cook(JAVA_SOURCE)
            fn = ev.getClazz().getDeclaredConstructor(gateway.new_array(jvm.java.lang.Class, 0)).newInstance(
                gateway.new_array(jvm.java.lang.Object, 0))
            _COMPILED[id(gateway)] = fn
    return fn


def _raw(df: Any) -> str | None:
    try:
        jdf = df._jdf  # classic PySpark only: a Spark Connect DataFrame has none
    except Exception:  # noqa: BLE001 - any failure to reach the JVM means: not known
        return None
    got = _function(df).apply(jdf)
    return got if isinstance(got, str) else "".join(got[i] for i in range(len(got)))  # chunks below 8 KiB


def _text(s: str) -> str:
    return _UNESCAPE.sub(lambda m: chr(int(m.group(1), 16)), s) if "\\u" in s else s


def describe(df: Any) -> Lineage | None:
    """How ``df``'s partitions get their rows (see :class:`Lineage`); ``None`` off classic PySpark, or when the
    JVM could not tell (logged once at INFO with the exception's class)."""
    try:
        text = _raw(df)
    except Exception as exc:  # noqa: BLE001 - a Spark build this cannot read: the caller takes the safe path
        log.info("lineage not read: %s", type(exc).__name__)
        return None
    if text is None:
        return None
    return _parse(text)


def _parse(text: str) -> Lineage | None:
    plan: list[tuple[str, int, str, list[str]]] = []
    parts: dict[int, tuple[list[str], list[str]]] = {}
    inputs: dict[str, list[str]] = {}  # leaf ref "rdd:partition" -> the identities of its inputs
    classes: dict[str, set[str]] = {}  # leaf ref -> its inputs' classes
    leaf_rdds: dict[str, str] = {}  # rdd id -> class
    n = None
    for line in text.split("\n"):
        f = line.split("\t")
        tag = f[0]
        if tag == "E":
            log.info("lineage not read: %s", f[1] if len(f) > 1 else "?")
            return None
        if tag == "X":
            plan.append((f[1], int(f[2]), f[3], f[4:]))
        elif tag == "N":
            n = int(f[1])
        elif tag == "P":
            parts[int(f[1])] = ([r for r in f[2].split(",") if r], [s for s in f[3].split(",") if s])
        elif tag == "L":
            leaf_rdds[f[1]] = f[2].rsplit(".", 1)[-1]
        elif tag == "K":
            ok = int(f[5]) >= 0 and int(f[6]) >= 0  # earliest/latest bound late (batch reads): no name
            ref = f"{f[1]}:{f[2]}"
            inputs.setdefault(ref, []).append(f"kafka\0{_text(f[3])}\0{f[4]}\0{f[5]}" if ok else "")
            classes.setdefault(ref, set()).add("KafkaBatchInputPartition")
        elif tag == "F":
            ref = f"{f[1]}:{f[2]}"
            inputs.setdefault(ref, []).append(f"file\0{_text(f[5])}\0{f[3]}\0{f[4]}")
            classes.setdefault(ref, set()).add("FilePartition")
        elif tag == "U":
            classes.setdefault(f"{f[1]}:{f[2]}", set()).add(f[3].rsplit(".", 1)[-1])
    if n is None or n < 0:
        return Lineage(OTHER, -1)
    names = [node for (_s, _d, node, _x) in plan]
    if any(node.endswith("JoinExec") or node == "CartesianProductExec" for node in names):
        return Lineage(OTHER, n)
    refs = [parts.get(p, ([], []))[0] for p in range(n)]
    shuffles = [parts.get(p, ([], []))[1] for p in range(n)]
    if all(len(r) == 1 and not r[0].startswith("?") for r in refs) and not any(shuffles) \
            and len({r[0] for r in refs}) == n:
        leaves = []
        for (ref,) in refs:
            ids = inputs.get(ref)
            rdd_class = leaf_rdds.get(ref.split(":")[0], "")
            kinds = classes.get(ref, set()) | ({"ParallelCollectionPartition"} if rdd_class == "ParallelCollectionRDD"
                                               else set())
            identity = "\0\0".join(ids) if ids and all(ids) else None
            leaves.append(Leaf(identity, bool(kinds) and kinds <= set(_ORDERED)))
        return Lineage(NARROW, n, tuple(leaves))
    if n and not any(refs) and all(len(s) == 1 for s in shuffles) and len({s[0] for s in shuffles}) == 1:
        return Lineage(SHUFFLE, n, exchange=_exchange(plan, names))
    return Lineage(OTHER, n)


def _exchange(plan: list[tuple[str, int, str, list[str]]], names: list[str]) -> str:
    """The kind of the exchange the final partitions read: the shallowest of the DataFrame's own plan, else of the
    batch's; ``adaptive`` when adaptive execution reads or coalesces it (its partitions then depend on sizes)."""
    if any(node in ("AQEShuffleReadExec", "CoalesceExec") for node in names):
        return "adaptive"
    for scope in ("df", "up"):
        xs = [(d, x) for (s, d, node, x) in plan if s == scope and "Exchange" in node and x
              and node not in ("BroadcastExchangeExec", "ReusedExchangeExec")]
        if xs:
            _d, x = min(xs, key=lambda e: e[0])
            kind = _KIND.get(x[0], "other")
            return "single" if kind == "round-robin" and x[1] == "1" else kind
    return "other"
