"""The Java side of :mod:`.lineage`: the class body Janino compiles in the driver's JVM, whose one method walks
a batch DataFrame's plan and RDD lineage and returns them as lines of text.

Kept apart from the Python that compiles it and reads its text (:mod:`.lineage`): it is Java, and it is what
decides which values may leave the JVM (named accessors, class names and numbers; errors by their class name
only, never the Kafka parameters an input partition carries).

Where it runs: compiled and called on the driver. Nothing here pickles.
"""

from __future__ import annotations

__all__ = ["JAVA_SOURCE"]

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
