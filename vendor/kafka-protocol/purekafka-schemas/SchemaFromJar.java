// Rebuilds Kafka message-schema JSON (the format of clients/src/main/resources/
// common/message/*.json in apache/kafka) from the generated `*Data` classes in a
// kafka-clients jar: field order, wire types, per-version presence and
// nullability, docs ("about") and defaults. Used by purekafka to generate
// kafka-protocol types for APIs the crate's release lacks; see
// ../PUREKAFKA-PATCH.md.
//
//   javac -cp kafka-clients-X.jar SchemaFromJar.java
//   java -cp kafka-clients-X.jar:. SchemaFromJar OUT_DIR StreamsGroupHeartbeatRequest ...
//
// What the compiled classes do not keep is passed in as arguments:
// entity types (NAME=ENTITY, a field path such as Topology.Subtopologies.SourceTopics
// or the struct-qualified TopicInfo.Name) and ignorable fields (NAME=!ignorable).
import org.apache.kafka.common.protocol.types.ArrayOf;
import org.apache.kafka.common.protocol.types.BoundField;
import org.apache.kafka.common.protocol.types.CompactArrayOf;
import org.apache.kafka.common.protocol.types.Schema;
import org.apache.kafka.common.protocol.types.TaggedFields;
import org.apache.kafka.common.protocol.types.Type;

import java.io.PrintWriter;
import java.lang.reflect.ParameterizedType;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.*;

public class SchemaFromJar {
    /** One field as merged over all versions. */
    static final class F {
        String name, type, about, defaultValue, structName;
        Class<?> structClass;
        TreeSet<Integer> versions = new TreeSet<>(), nullable = new TreeSet<>();
        List<F> fields; // struct fields, when the field is a struct or an array of structs
    }

    static final Map<String, String> extra = new HashMap<>();
    static final Map<String, Integer> structUses = new HashMap<>();
    static final Map<String, List<F>> structDefs = new LinkedHashMap<>();

    static String pascal(String snake) {
        StringBuilder b = new StringBuilder();
        for (String p : snake.split("_")) b.append(Character.toUpperCase(p.charAt(0))).append(p.substring(1));
        return b.toString();
    }

    static String camel(String snake) {
        String p = pascal(snake);
        return Character.toLowerCase(p.charAt(0)) + p.substring(1);
    }

    static String prim(Type t) {
        switch (t.toString()) {
            case "BOOLEAN": return "bool";
            case "INT8": return "int8";
            case "INT16": return "int16";
            case "UINT16": return "uint16";
            case "INT32": return "int32";
            case "INT64": return "int64";
            case "FLOAT64": return "float64";
            case "UUID": return "uuid";
            case "COMPACT_STRING": case "COMPACT_NULLABLE_STRING": case "STRING": case "NULLABLE_STRING": return "string";
            case "COMPACT_BYTES": case "COMPACT_NULLABLE_BYTES": case "BYTES": case "NULLABLE_BYTES": return "bytes";
            case "COMPACT_RECORDS": case "RECORDS": return "records";
            default: throw new IllegalStateException("unknown type " + t);
        }
    }

    static Class<?> javaFieldClass(Class<?> owner, String snake) throws Exception {
        java.lang.reflect.Field jf = owner.getDeclaredField(camel(snake));
        java.lang.reflect.Type g = jf.getGenericType();
        if (g instanceof ParameterizedType) g = ((ParameterizedType) g).getActualTypeArguments()[0];
        return (Class<?>) g;
    }

    static String defaultOf(Class<?> owner, String snake, String type, boolean array, boolean struct) throws Exception {
        Object o = owner.getDeclaredConstructor().newInstance();
        java.lang.reflect.Field jf = owner.getDeclaredField(camel(snake));
        jf.setAccessible(true);
        Object v = jf.get(o);
        if (v == null) return "null";
        if (array || struct) return null;
        switch (type) {
            case "bool": return ((Boolean) v) ? "true" : null;
            case "string": return ((String) v).isEmpty() ? null : (String) v;
            case "uuid": case "bytes": case "records": return null;
            default: {
                long n = ((Number) v).longValue();
                return n == 0 ? null : Long.toString(n);
            }
        }
    }

    /** Merges one version's schema into the ordered field list. */
    static void merge(List<F> into, Schema s, int version, Class<?> owner) throws Exception {
        int at = 0;
        for (BoundField bf : s.fields()) {
            Type t = bf.def.type;
            if (t instanceof TaggedFields) {
                if (!((TaggedFields) t).toString().equals("TAGGED_FIELDS_TYPE_NAME()") && hasTags((TaggedFields) t))
                    throw new IllegalStateException("tagged fields are not handled: " + bf.def.name);
                continue;
            }
            String name = pascal(bf.def.name);
            F f = null;
            for (F g : into) if (g.name.equals(name)) f = g;
            if (f == null) {
                f = new F();
                f.name = name;
                f.about = bf.def.docString;
                into.add(at, f);
            }
            at = into.indexOf(f) + 1;
            f.versions.add(version);
            if (t.isNullable()) f.nullable.add(version);
            boolean array = t instanceof CompactArrayOf || t instanceof ArrayOf;
            Type elem = array ? t.arrayElementType().get() : t;
            if (elem instanceof Schema) {
                Class<?> c = javaFieldClass(owner, bf.def.name);
                f.structClass = c;
                f.structName = c.getSimpleName();
                f.type = (array ? "[]" : "") + f.structName;
                if (f.fields == null) f.fields = structDefs.computeIfAbsent(f.structName, k -> new ArrayList<>());
                merge(f.fields, (Schema) elem, version, c);
            } else {
                f.type = (array ? "[]" : "") + prim(elem);
            }
            f.defaultValue = defaultOf(owner, bf.def.name, prim0(f.type), array, f.structName != null);
        }
    }

    static String prim0(String t) { return t.startsWith("[]") ? t.substring(2) : t; }

    static boolean hasTags(TaggedFields t) throws Exception {
        java.lang.reflect.Field m = TaggedFields.class.getDeclaredField("fields");
        m.setAccessible(true);
        return !((Map<?, ?>) m.get(t)).isEmpty();
    }

    static String range(TreeSet<Integer> vs, int hi) {
        if (vs.isEmpty()) return null;
        int lo = vs.first(), top = vs.last();
        if (top - lo + 1 != vs.size()) throw new IllegalStateException("gap in versions " + vs);
        if (top == hi) return lo + "+";
        return lo == top ? Integer.toString(lo) : lo + "-" + top;
    }

    static String q(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void countUses(List<F> fs) {
        for (F f : fs) if (f.structName != null) {
            structUses.merge(f.structName, 1, Integer::sum);
            countUses(f.fields);
        }
    }

    static void write(PrintWriter w, List<F> fs, String ind, String path, int hi, Set<String> written) {
        for (int i = 0; i < fs.size(); i++) {
            F f = fs.get(i);
            String p = path.isEmpty() ? f.name : path + "." + f.name;
            StringBuilder b = new StringBuilder();
            b.append(ind).append("{ \"name\": ").append(q(f.name)).append(", \"type\": ").append(q(f.type))
             .append(", \"versions\": ").append(q(range(f.versions, hi)));
            String nv = range(f.nullable, hi);
            if (nv != null) b.append(", \"nullableVersions\": ").append(q(nv));
            String ent = extra.get(p);
            if (ent == null && f.structName == null) ent = extra.get(structOf(path) + "." + f.name);
            if (ent != null && !ent.startsWith("!")) b.append(", \"entityType\": ").append(q(ent));
            if ("!ignorable".equals(extra.get(p))) b.append(", \"ignorable\": true");
            if (f.defaultValue != null) b.append(", \"default\": ").append(q(f.defaultValue));
            b.append(",\n").append(ind).append("  \"about\": ").append(q(f.about == null ? "" : f.about));
            boolean inline = f.structName != null && structUses.get(f.structName) == 1 && written.add(f.structName);
            if (inline) {
                b.append(",\n").append(ind).append("  \"fields\": [\n");
                w.print(b);
                write(w, f.fields, ind + "    ", p, hi, written);
                w.print(ind + "  ]}");
            } else {
                b.append(" }");
                w.print(b);
            }
            w.println(i + 1 < fs.size() ? "," : "");
        }
    }

    static String currentStruct = "";
    static String structOf(String path) { return currentStruct; }

    public static void main(String[] args) throws Exception {
        Path out = Path.of(args[0]);
        String name = args[1];
        for (int i = 2; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            extra.put(kv[0], kv[1]);
        }
        structUses.clear();
        structDefs.clear();
        Class<?> c = Class.forName("org.apache.kafka.common.message." + name + "Data");
        Object inst = c.getDeclaredConstructor().newInstance();
        short apiKey = (Short) c.getMethod("apiKey").invoke(inst);
        short lo = (Short) c.getMethod("lowestSupportedVersion").invoke(inst);
        short hi = (Short) c.getMethod("highestSupportedVersion").invoke(inst);
        Schema[] schemas = (Schema[]) c.getField("SCHEMAS").get(null);
        List<F> fields = new ArrayList<>();
        for (int v = lo; v <= hi; v++) merge(fields, schemas[v], v, c);
        countUses(fields);
        try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(out.resolve(name + ".json")))) {
            w.println("// Rebuilt by SchemaFromJar.java from " + c.getName() + " in kafka-clients "
                + org.apache.kafka.common.utils.internals.AppInfoParser.getVersion() + "; see ../PUREKAFKA-PATCH.md.");
            w.println("{");
            w.println("  \"apiKey\": " + apiKey + ",");
            w.println("  \"type\": " + q(name.endsWith("Request") ? "request" : "response") + ",");
            if (name.endsWith("Request")) w.println("  \"listeners\": [\"broker\"],");
            w.println("  \"name\": " + q(name) + ",");
            w.println("  \"validVersions\": " + q(lo == hi ? Short.toString(lo) : lo + "-" + hi) + ",");
            w.println("  \"flexibleVersions\": \"0+\",");
            w.println("  \"fields\": [");
            Set<String> written = new HashSet<>();
            write(w, fields, "    ", "", hi, written);
            w.print("  ]");
            List<String> common = new ArrayList<>();
            for (var e : structUses.entrySet()) if (e.getValue() > 1) common.add(e.getKey());
            Collections.sort(common);
            if (!common.isEmpty()) {
                w.println(",");
                w.println("  \"commonStructs\": [");
                for (int i = 0; i < common.size(); i++) {
                    String s = common.get(i);
                    currentStruct = s;
                    w.println("    { \"name\": " + q(s) + ", \"versions\": \"0+\", \"fields\": [");
                    write(w, structDefs.get(s), "      ", s, hi, written);
                    w.print("    ]}");
                    w.println(i + 1 < common.size() ? "," : "");
                }
                w.println("  ]");
            } else {
                w.println();
            }
            w.println("}");
        }
    }
}
