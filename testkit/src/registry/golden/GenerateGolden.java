// Writes the Confluent-framed Avro golden vectors with Apache Avro's Java
// library: a 0 magic byte, the schema id as a 4-byte big-endian int, then
// the datum from GenericDatumWriter's binary encoder (the framing
// Confluent's KafkaAvroSerializer documents). Run by ./regenerate.
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;

public class GenerateGolden {
    static byte[] frame(int id, Schema schema, Object datum) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(0);
        out.write(ByteBuffer.allocate(4).putInt(id).array());
        BinaryEncoder enc = EncoderFactory.get().binaryEncoder(out, null);
        new GenericDatumWriter<Object>(schema).write(datum, enc);
        enc.flush();
        return out.toByteArray();
    }

    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        Schema order = new Schema.Parser().parse(Files.readString(dir.resolve("order.avsc")));
        GenericRecord o = new GenericData.Record(order);
        o.put("id", 7L);
        o.put("item", "tea");
        Files.write(dir.resolve("order-id1.bin"), frame(1, order, o));

        Schema all = new Schema.Parser().parse(Files.readString(dir.resolve("all-types.avsc")));
        GenericRecord a = new GenericData.Record(all);
        a.put("flag", true);
        a.put("count", -3);
        a.put("big", 1234567890123L);
        a.put("ratio", 0.5f);
        a.put("precise", -2.25d);
        a.put("raw", ByteBuffer.wrap(new byte[] {0, 1, (byte) 0xff}));
        a.put("name", "ключ");
        a.put("maybe", null);
        a.put("maybe_text", "yes");
        a.put("colour", new GenericData.EnumSymbol(all.getField("colour").schema(), "GREEN"));
        a.put("tags", List.of("a", "b"));
        a.put("scores", Map.of("x", 1L));
        a.put("hash", new GenericData.Fixed(all.getField("hash").schema(), new byte[] {9, 8, 7, 6}));
        Files.write(dir.resolve("all-types-id16909060.bin"), frame(0x01020304, all, a));
    }
}
