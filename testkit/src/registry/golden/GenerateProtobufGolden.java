// Writes the Confluent-framed Protobuf golden vectors: the message bytes
// come from protobuf-java's DynamicMessage over a descriptor built here to
// match shop.proto; the framing (0 magic byte, the schema id as a 4-byte
// big-endian int, the message-index path as zig-zag varints with [0]
// written as the single byte 0) follows the format Confluent documents for
// KafkaProtobufSerializer, whose jar is not on Maven Central. The index
// path is taken from the descriptor (each type's index in its parent).
// Run by ./regenerate.
import com.google.protobuf.ByteString;
import com.google.protobuf.DescriptorProtos.DescriptorProto;
import com.google.protobuf.DescriptorProtos.EnumDescriptorProto;
import com.google.protobuf.DescriptorProtos.EnumValueDescriptorProto;
import com.google.protobuf.DescriptorProtos.FieldDescriptorProto;
import com.google.protobuf.DescriptorProtos.FieldDescriptorProto.Label;
import com.google.protobuf.DescriptorProtos.FieldDescriptorProto.Type;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.MessageOptions;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

public class GenerateProtobufGolden {
    static FieldDescriptorProto field(String name, int number, Type type) {
        return FieldDescriptorProto.newBuilder()
            .setName(name).setNumber(number).setType(type).setLabel(Label.LABEL_OPTIONAL).build();
    }

    static FieldDescriptorProto typed(String name, int number, Type type, String typeName, Label label) {
        return FieldDescriptorProto.newBuilder()
            .setName(name).setNumber(number).setType(type).setTypeName(typeName).setLabel(label).build();
    }

    static void zigzag(ByteArrayOutputStream out, long v) {
        long z = (v << 1) ^ (v >> 63);
        while ((z & ~0x7fL) != 0) {
            out.write((int) ((z & 0x7f) | 0x80));
            z >>>= 7;
        }
        out.write((int) z);
    }

    static List<Integer> indexes(Descriptor d) {
        List<Integer> path = new ArrayList<>();
        for (Descriptor m = d; m != null; m = m.getContainingType()) {
            path.add(m.getIndex());
        }
        Collections.reverse(path);
        return path;
    }

    static byte[] frame(int id, Descriptor type, DynamicMessage message) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(0);
        out.write(ByteBuffer.allocate(4).putInt(id).array());
        List<Integer> path = indexes(type);
        if (path.equals(List.of(0))) {
            out.write(0);
        } else {
            zigzag(out, path.size());
            for (int i : path) {
                zigzag(out, i);
            }
        }
        out.write(message.toByteArray());
        return out.toByteArray();
    }

    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);
        DescriptorProto note = DescriptorProto.newBuilder().setName("Note")
            .addField(field("text", 1, Type.TYPE_STRING)).build();
        DescriptorProto line = DescriptorProto.newBuilder().setName("Line")
            .addField(field("sku", 1, Type.TYPE_STRING))
            .addField(field("qty", 2, Type.TYPE_UINT32))
            .addNestedType(note).build();
        DescriptorProto entry = DescriptorProto.newBuilder().setName("CountsEntry")
            .addField(field("key", 1, Type.TYPE_STRING))
            .addField(field("value", 2, Type.TYPE_INT32))
            .setOptions(MessageOptions.newBuilder().setMapEntry(true)).build();
        DescriptorProto order = DescriptorProto.newBuilder().setName("Order")
            .addField(field("id", 1, Type.TYPE_INT64))
            .addField(field("item", 2, Type.TYPE_STRING))
            .addField(field("delta", 3, Type.TYPE_INT32))
            .addField(field("offset", 4, Type.TYPE_SINT64))
            .addField(field("paid", 5, Type.TYPE_BOOL))
            .addField(field("price", 6, Type.TYPE_DOUBLE))
            .addField(field("raw", 7, Type.TYPE_BYTES))
            .addField(typed("status", 8, Type.TYPE_ENUM, ".shop.Status", Label.LABEL_OPTIONAL))
            .addField(FieldDescriptorProto.newBuilder().setName("sizes").setNumber(9)
                .setType(Type.TYPE_INT32).setLabel(Label.LABEL_REPEATED))
            .addField(typed("lines", 10, Type.TYPE_MESSAGE, ".shop.Order.Line", Label.LABEL_REPEATED))
            .addField(typed("counts", 11, Type.TYPE_MESSAGE, ".shop.Order.CountsEntry", Label.LABEL_REPEATED))
            .addNestedType(line).addNestedType(entry).build();
        FileDescriptorProto file = FileDescriptorProto.newBuilder()
            .setName("shop.proto").setPackage("shop").setSyntax("proto3")
            .addMessageType(order)
            .addMessageType(DescriptorProto.newBuilder().setName("Refund")
                .addField(field("order_id", 1, Type.TYPE_INT64)))
            .addEnumType(EnumDescriptorProto.newBuilder().setName("Status")
                .addValue(EnumValueDescriptorProto.newBuilder().setName("NEW").setNumber(0))
                .addValue(EnumValueDescriptorProto.newBuilder().setName("SHIPPED").setNumber(2)))
            .build();
        FileDescriptor fd = FileDescriptor.buildFrom(file, new FileDescriptor[0]);

        Descriptor o = fd.findMessageTypeByName("Order");
        Descriptor l = o.findNestedTypeByName("Line");
        Descriptor e = o.findNestedTypeByName("CountsEntry");
        DynamicMessage aLine = DynamicMessage.newBuilder(l)
            .setField(l.findFieldByName("sku"), "TEA-1")
            .setField(l.findFieldByName("qty"), 3)
            .build();
        DynamicMessage count = DynamicMessage.newBuilder(e)
            .setField(e.findFieldByName("key"), "x")
            .setField(e.findFieldByName("value"), 1)
            .build();
        DynamicMessage anOrder = DynamicMessage.newBuilder(o)
            .setField(o.findFieldByName("id"), 7L)
            .setField(o.findFieldByName("item"), "ключ")
            .setField(o.findFieldByName("delta"), -3)
            .setField(o.findFieldByName("offset"), -5L)
            .setField(o.findFieldByName("paid"), true)
            .setField(o.findFieldByName("price"), 2.5d)
            .setField(o.findFieldByName("raw"), ByteString.copyFrom(new byte[] {0, 1, (byte) 0xff}))
            .setField(o.findFieldByName("status"), fd.findEnumTypeByName("Status").findValueByNumber(2))
            .addRepeatedField(o.findFieldByName("sizes"), 1)
            .addRepeatedField(o.findFieldByName("sizes"), 300)
            .addRepeatedField(o.findFieldByName("lines"), aLine)
            .addRepeatedField(o.findFieldByName("counts"), count)
            .build();
        Files.write(dir.resolve("shop-order-id1.bin"), frame(1, o, anOrder));

        DynamicMessage noted = DynamicMessage.newBuilder(l.findNestedTypeByName("Note"))
            .setField(l.findNestedTypeByName("Note").findFieldByName("text"), "fragile")
            .build();
        Files.write(dir.resolve("shop-note-id16909060.bin"),
            frame(0x01020304, l.findNestedTypeByName("Note"), noted));
    }
}
