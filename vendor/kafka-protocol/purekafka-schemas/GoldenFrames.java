// Prints, as hex, StreamsGroupHeartbeat and StreamsGroupDescribe message bodies
// encoded by kafka-clients' own generated classes at every version, for
// purekafka's round-trip tests of the generated Rust types (the expected
// values are written out in those tests; see ../PUREKAFKA-PATCH.md).
//
//   javac -cp 'KAFKA/libs/*' GoldenFrames.java && java -cp 'KAFKA/libs/*:.' GoldenFrames
import org.apache.kafka.common.message.StreamsGroupDescribeRequestData;
import org.apache.kafka.common.message.StreamsGroupDescribeResponseData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatRequestData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatResponseData;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.MessageUtil;

import java.util.HexFormat;
import java.util.List;

public class GoldenFrames {
    static void print(String name, ApiMessage m, short version) {
        byte[] b = MessageUtil.toByteBufferAccessor(m, version).buffer().array();
        System.out.println(name + " v" + version + " " + HexFormat.of().formatHex(b));
    }

    public static void main(String[] args) {
        var tasks = List.of(new StreamsGroupHeartbeatRequestData.TaskIds().setSubtopologyId("0").setPartitions(List.of(0, 2)));
        var join = new StreamsGroupHeartbeatRequestData()
            .setGroupId("app").setMemberId("m-1").setMemberEpoch(0).setRebalanceTimeoutMs(30000)
            .setProcessId("p-1")
            .setTopology(new StreamsGroupHeartbeatRequestData.Topology().setEpoch(1).setSubtopologies(List.of(
                new StreamsGroupHeartbeatRequestData.Subtopology().setSubtopologyId("0")
                    .setSourceTopics(List.of("in"))
                    .setStateChangelogTopics(List.of(new StreamsGroupHeartbeatRequestData.TopicInfo()
                        .setName("app-store-changelog").setTopicConfigs(List.of(
                            new StreamsGroupHeartbeatRequestData.KeyValue().setKey("cleanup.policy").setValue("compact"))))))))
            .setActiveTasks(tasks)
            .setUserEndpoint(new StreamsGroupHeartbeatRequestData.Endpoint().setHost("h").setPort(65000));
        for (short v = 0; v <= 1; v++) print("heartbeat-request", join, v);

        var rtasks = List.of(new StreamsGroupHeartbeatResponseData.TaskIds().setSubtopologyId("0").setPartitions(List.of(1, 3)));
        for (short v = 0; v <= 1; v++) {
            var resp = new StreamsGroupHeartbeatResponseData()
                .setMemberId("m-1").setMemberEpoch(5).setHeartbeatIntervalMs(5000).setTaskOffsetIntervalMs(60000)
                .setStatus(List.of(new StreamsGroupHeartbeatResponseData.Status().setStatusCode((byte) 3).setStatusDetail("missing")))
                .setActiveTasks(rtasks).setStandbyTasks(List.of()).setWarmupTasks(null);
            if (v == 0) resp.setAcceptableRecoveryLagLegacy(10000);
            else resp.setAcceptableRecoveryLag(20000L).setTopologyDescriptionRequired(true);
            print("heartbeat-response", resp, v);
        }

        var describe = new StreamsGroupDescribeRequestData().setGroupIds(List.of("app", "other")).setIncludeAuthorizedOperations(true);
        for (short v = 0; v <= 1; v++) print("describe-request", describe, v);

        var member = new StreamsGroupDescribeResponseData.Member().setMemberId("m-1").setMemberEpoch(5)
            .setClientId("c").setClientHost("/127.0.0.1").setTopologyEpoch(1).setProcessId("p-1")
            .setAssignment(new StreamsGroupDescribeResponseData.Assignment().setActiveTasks(List.of(
                new StreamsGroupDescribeResponseData.TaskIds().setSubtopologyId("0").setPartitions(List.of(0, 1)))));
        var group = new StreamsGroupDescribeResponseData.DescribedGroup().setGroupId("app").setGroupState("Stable")
            .setGroupEpoch(3).setAssignmentEpoch(3)
            .setTopology(new StreamsGroupDescribeResponseData.Topology().setEpoch(1).setSubtopologies(List.of(
                new StreamsGroupDescribeResponseData.Subtopology().setSubtopologyId("0").setSourceTopics(List.of("in")))))
            .setMembers(List.of(member));
        var missing = new StreamsGroupDescribeResponseData.DescribedGroup().setGroupId("other").setErrorCode((short) 69)
            .setErrorMessage("Group other not found.");
        var dresp = new StreamsGroupDescribeResponseData().setGroups(List.of(group, missing));
        for (short v = 0; v <= 1; v++) print("describe-response", dresp, v);
    }
}
