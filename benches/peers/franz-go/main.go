// Command franz-go-perf is the franz-go peer of `purekafka perf produce` and
// `purekafka perf consume` for benches/peers: the same flags, the same
// payloads (random A-Z bytes per record, or random lines of a payload file,
// as Kafka's ProducerPerformance) and the same one-line JSON report.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// maxBucketMs is the last 1 ms latency bucket; slower acks share it.
const maxBucketMs = 60_000

type latencies struct {
	buckets [maxBucketMs + 1]atomic.Uint64
	sumUs   atomic.Uint64
	maxUs   atomic.Uint64
	count   atomic.Uint64
	failed  atomic.Uint64
}

func (l *latencies) record(d time.Duration) {
	us := uint64(d.Microseconds())
	ms := min(us/1000, maxBucketMs)
	l.buckets[ms].Add(1)
	l.sumUs.Add(us)
	for {
		old := l.maxUs.Load()
		if us <= old || l.maxUs.CompareAndSwap(old, us) {
			break
		}
	}
	l.count.Add(1)
}

// percentile is the smallest latency (ms) at or below which fraction q lies.
func (l *latencies) percentile(q float64) uint64 {
	n := l.count.Load()
	target := uint64(math.Max(1, math.Ceil(float64(n)*q)))
	var seen uint64
	for ms := range l.buckets {
		seen += l.buckets[ms].Load()
		if seen >= target {
			return uint64(ms)
		}
	}
	return maxBucketMs
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "franz-go-perf: "+format+"\n", a...)
	os.Exit(1)
}

func readLines(path string) [][]byte {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("payload file: %v", err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(sc.Bytes()) > 0 {
			lines = append(lines, append([]byte(nil), sc.Bytes()...))
		}
	}
	if len(lines) == 0 {
		fail("payload file %s has no non-empty lines", path)
	}
	return lines
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "produce" && os.Args[1] != "consume") {
		fail("usage: franz-go-perf produce|consume [flags]")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	bootstrap := fs.String("bootstrap-server", "127.0.0.1:19092", "broker")
	topic := fs.String("topic", "", "topic")
	n := fs.Uint64("num-records", 0, "records to send or read")
	size := fs.Int("record-size", 100, "bytes per value (without --payload-file)")
	payloadFile := fs.String("payload-file", "", "values are random non-empty lines of this file")
	acks := fs.String("acks", "all", "1 or all")
	compression := fs.String("compression", "none", "none, gzip, snappy, lz4 or zstd")
	lingerMs := fs.Int("linger-ms", -1, "linger (-1: franz-go default)")
	batchSize := fs.Int("batch-size", -1, "max batch bytes (-1: franz-go default)")
	timeoutMs := fs.Int("timeout-ms", 10_000, "consume: give up after this long without a record")
	throughput := fs.Float64("throughput", -1, "records per second to aim at (-1: no limit), as ProducerPerformance")
	_ = fs.Parse(os.Args[2:])
	if *topic == "" || *n == 0 {
		fail("--topic and --num-records are required")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(*bootstrap)}
	if os.Args[1] == "consume" {
		consume(opts, *topic, *n, time.Duration(*timeoutMs)*time.Millisecond)
		return
	}
	opts = append(opts, kgo.DefaultProduceTopic(*topic))
	switch *acks {
	case "all", "-1":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	default:
		fail("--acks must be 1 or all")
	}
	switch *compression {
	case "none":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	default:
		fail("unknown --compression %q", *compression)
	}
	if *lingerMs >= 0 {
		opts = append(opts, kgo.ProducerLinger(time.Duration(*lingerMs)*time.Millisecond))
	}
	if *batchSize > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(*batchSize)))
	}
	var lines [][]byte
	if *payloadFile != "" {
		lines = readLines(*payloadFile)
	}
	produce(opts, *n, *size, lines, *throughput)
}

func produce(opts []kgo.Opt, n uint64, size int, lines [][]byte, throughput float64) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail("client: %v", err)
	}
	defer cl.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	lat := &latencies{}
	var firstErr atomic.Value
	started := time.Now()
	for i := uint64(0); i < n; i++ {
		var value []byte
		if lines != nil {
			value = lines[rng.IntN(len(lines))]
		} else {
			// A fresh slice per record: franz-go keeps it until acknowledged.
			value = make([]byte, size)
			for j := range value {
				value[j] = byte('A' + rng.IntN(26))
			}
		}
		sentAt := time.Now()
		cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				lat.failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			lat.record(time.Since(sentAt))
		})
		if throughput > 0 {
			// Sleep when ahead of the target rate, as ours and rdkafka-perf do.
			due := time.Duration(float64(i+1) / throughput * float64(time.Second))
			if ahead := due - time.Since(started); ahead > 2*time.Millisecond {
				time.Sleep(ahead)
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		fail("flush: %v", err)
	}
	elapsed := time.Since(started).Seconds()
	if f := lat.failed.Load(); f > 0 {
		fail("%d of %d records failed, first: %v", f, n, firstErr.Load())
	}
	count := lat.count.Load()
	report(map[string]any{
		"records":         count,
		"elapsed_s":       elapsed,
		"records_per_sec": float64(count) / elapsed,
		"latency_ms": map[string]any{
			"avg":  float64(lat.sumUs.Load()) / 1000 / math.Max(1, float64(count)),
			"p50":  lat.percentile(0.50),
			"p95":  lat.percentile(0.95),
			"p99":  lat.percentile(0.99),
			"p999": lat.percentile(0.999),
			"max":  float64(lat.maxUs.Load()) / 1000,
		},
	})
}

// consume reads n records from the start of every partition of topic, with
// no group (direct partition consuming), as `purekafka perf consume` does
// without --group.
func consume(opts []kgo.Opt, topic string, n uint64, timeout time.Duration) {
	opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fail("client: %v", err)
	}
	defer cl.Close()
	var records, bytes uint64
	started := time.Now()
	for records < n {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		fetches := cl.PollFetches(ctx)
		cancel()
		if ctx.Err() != nil && fetches.NumRecords() == 0 {
			fail("read %d of %d records before a %v gap", records, n, timeout)
		}
		fetches.EachError(func(t string, p int32, err error) {
			if err != context.DeadlineExceeded {
				fail("fetch %s[%d]: %v", t, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			records++
			bytes += uint64(len(r.Key) + len(r.Value))
		})
	}
	elapsed := time.Since(started).Seconds()
	report(map[string]any{
		"records":               records,
		"elapsed_s":             elapsed,
		"fetch_records_per_sec": float64(records) / elapsed,
		"fetch_mb_per_sec":      float64(bytes) / (1 << 20) / elapsed,
	})
}

func report(v map[string]any) {
	out, err := json.Marshal(v)
	if err != nil {
		fail("json: %v", err)
	}
	fmt.Println(string(out))
}
