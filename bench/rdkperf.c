/*
 * rdkperf: the bench's C load generator on librdkafka, with no per-record work beyond counting.
 *
 * Why: kcat does per-record work of its own on top of librdkafka's (handling every consumed
 * message even with -f '', reading its input line by line when producing). At 100-byte records
 * the client, not the broker, set the bench's consume figure: kcat used 1.6 cores reading 1.36M
 * records/s while the broker used 0.06. Here the consumer only counts what
 * rd_kafka_consume_batch_queue() hands it, and the producer hands librdkafka slices of one
 * pre-generated buffer, 10,000 per rd_kafka_produce_batch() call, without copying them. What is
 * left is librdkafka's own work per record: its broker thread allocates and queues one message
 * object per record, and one fetch is in flight per broker.
 *
 *   rdkperf consume -b HOST:PORT -t TOPIC -c COUNT [-T SECONDS] [-X key=value ...]
 *   rdkperf produce -b HOST:PORT -t TOPIC -c COUNT -s RECORD_SIZE [-p PARTITIONS] [-T SECONDS]
 *                   [-X key=value ...]
 *
 * consume reads every partition of TOPIC from its beginning (legacy simple consumer, all
 * partitions on one queue) until COUNT records were seen; it fails if every partition reaches
 * its end first. produce sends COUNT records of RECORD_SIZE random letters with null keys
 * (librdkafka's sticky partitioner), or round-robin over partitions 0..PARTITIONS-1 with -p, then
 * flushes. -X sets any librdkafka property after the throughput-minded defaults. -T (default 60)
 * bounds the run: consume fails after that many seconds without a record, produce's flush waits
 * that long.
 *
 * Prints one JSON line on stdout at the end: records, bytes (record values), seconds (consume:
 * first record to last; produce: first produce call until everything is acknowledged),
 * seconds_from_start (from before the client is created), errors and a few details; produce also
 * prints first_mono / end_mono, the CLOCK_MONOTONIC seconds of its first produce call and of the
 * end, so the runs of several processes at once can be joined into one window.
 * Diagnostics go to stderr; the exit status is non-zero on any error.
 *
 * Build: cc -O2 -Wall -Wextra bench/rdkperf.c -lrdkafka -o rdkperf (Debian: librdkafka-dev).
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

/* Messages asked for per rd_kafka_consume_batch_queue() call: large enough that the call is paid
 * once per thousand records, small enough that the message objects librdkafka's broker thread
 * just wrote are still in cache when they are counted and freed (65,536 measured 5-15% slower,
 * and used more CPU, at 100 B and 1 KiB). */
#define CONSUME_BATCH 1024
/* The pre-generated payload pool. Record i starts at (i * size) mod POOL_SPAN, and POOL_SPAN
 * (2^26 - 1) shares no factor with 100 or any power of two, so each pass over the pool starts at
 * another phase and records keep differing; 64 MiB is far larger than any batch, so compression sees
 * fresh data, and far smaller than the 1-2 GB a bench run moves, so building it costs little. */
#define POOL_SPAN ((size_t)64 * 1024 * 1024 - 1)
/* Messages per rd_kafka_produce_batch() call: with explicit partitions the call reads the clock
 * and takes the partition's lock once per call instead of once per message. */
#define PRODUCE_BATCH 10000
#define MAX_PROPS 64
#define MAX_PRINTED_ERRORS 10

struct options {
        const char *mode;
        const char *bootstrap;
        const char *topic;
        long long count;
        long record_size;
        int partitions;
        double timeout_s;
        const char *props[MAX_PROPS]; /* "key=value" from -X, applied after the defaults */
        int n_props;
};

static long long delivery_errors;

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(const char *argv0) {
        fprintf(stderr,
                "usage: %s consume -b HOST:PORT -t TOPIC -c COUNT [-T SECONDS=60] [-X key=value ...]\n"
                "       %s produce -b HOST:PORT -t TOPIC -c COUNT -s RECORD_SIZE [-p PARTITIONS]\n"
                "                  [-T SECONDS=60] [-X key=value ...]\n",
                argv0, argv0);
        exit(2);
}

static long long parse_number(const char *text, const char *what) {
        char *end;
        errno = 0;
        long long value = strtoll(text, &end, 10);
        if (errno || *end || value < 0) {
                fprintf(stderr, "rdkperf: %s must be a non-negative integer, got '%s'\n", what, text);
                exit(2);
        }
        return value;
}

static void parse_args(int argc, char **argv, struct options *o) {
        if (argc < 2)
                usage(argv[0]);
        o->mode = argv[1];
        if (strcmp(o->mode, "consume") != 0 && strcmp(o->mode, "produce") != 0)
                usage(argv[0]);
        optind = 2;
        int opt;
        while ((opt = getopt(argc, argv, "b:t:c:s:p:T:X:")) != -1) {
                switch (opt) {
                case 'b': o->bootstrap = optarg; break;
                case 't': o->topic = optarg; break;
                case 'c': o->count = parse_number(optarg, "-c"); break;
                case 's': o->record_size = (long)parse_number(optarg, "-s"); break;
                case 'p': o->partitions = (int)parse_number(optarg, "-p"); break;
                case 'T': o->timeout_s = (double)parse_number(optarg, "-T"); break;
                case 'X':
                        if (o->n_props == MAX_PROPS || !strchr(optarg, '=')) {
                                fprintf(stderr, "rdkperf: -X expects key=value (at most %d), got '%s'\n",
                                        MAX_PROPS, optarg);
                                exit(2);
                        }
                        o->props[o->n_props++] = optarg;
                        break;
                default: usage(argv[0]);
                }
        }
        if (optind != argc || !o->bootstrap || !o->topic || o->count <= 0)
                usage(argv[0]);
        if (strcmp(o->mode, "produce") == 0 && (o->record_size <= 0 || (size_t)o->record_size > POOL_SPAN))
                usage(argv[0]);
}

static void set_prop(rd_kafka_conf_t *conf, const char *key, const char *value) {
        char err[512];
        if (rd_kafka_conf_set(conf, key, value, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "rdkperf: %s=%s: %s\n", key, value, err);
                exit(2);
        }
}

/* The defaults for `mode`, then every -X (so -X wins). */
static rd_kafka_conf_t *make_conf(const struct options *o, const char *const *defaults) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        set_prop(conf, "bootstrap.servers", o->bootstrap);
        for (; *defaults; defaults += 2)
                set_prop(conf, defaults[0], defaults[1]);
        for (int i = 0; i < o->n_props; i++) {
                char key[256];
                const char *eq = strchr(o->props[i], '=');
                size_t n = (size_t)(eq - o->props[i]);
                if (n >= sizeof(key)) {
                        fprintf(stderr, "rdkperf: -X key too long: %s\n", o->props[i]);
                        exit(2);
                }
                memcpy(key, o->props[i], n);
                key[n] = '\0';
                set_prop(conf, key, eq + 1);
        }
        return conf;
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
        (void)rk;
        (void)opaque;
        fprintf(stderr, "rdkperf: client error %s: %s\n", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

static rd_kafka_t *make_client(rd_kafka_type_t type, rd_kafka_conf_t *conf) {
        char err[512];
        rd_kafka_conf_set_error_cb(conf, error_cb);
        rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof(err));
        if (!rk) {
                fprintf(stderr, "rdkperf: rd_kafka_new: %s\n", err);
                exit(1);
        }
        return rk;
}

/* ---------------------------------------------------------------------------------- consume */

static const char *const CONSUME_DEFAULTS[] = {
        /* big fetches, so a request carries thousands of records, and a deep prefetch queue
         * (librdkafka's default of 100,000 records is 10 MB of 100-byte records) */
        "fetch.message.max.bytes", "10485760",
        "fetch.max.bytes", "52428800",
        "queued.max.messages.kbytes", "1048576",
        "queued.min.messages", "1000000",
        "check.crcs", "false",
        /* an event per partition end, so a topic holding fewer records than asked is an error */
        "enable.partition.eof", "true",
        NULL,
};

static int consume(const struct options *o) {
        double t_start = now_s();
        rd_kafka_t *rk = make_client(RD_KAFKA_CONSUMER, make_conf(o, CONSUME_DEFAULTS));
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);
        if (!rkt) {
                fprintf(stderr, "rdkperf: topic %s: %s\n", o->topic, rd_kafka_err2str(rd_kafka_last_error()));
                return 1;
        }
        const struct rd_kafka_metadata *md;
        rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
        if (err) {
                fprintf(stderr, "rdkperf: metadata for %s: %s\n", o->topic, rd_kafka_err2str(err));
                return 1;
        }
        if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt == 0) {
                fprintf(stderr, "rdkperf: topic %s: %s\n", o->topic,
                        md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "not in metadata");
                return 1;
        }
        int n_partitions = md->topics[0].partition_cnt;
        int32_t *ids = calloc((size_t)n_partitions, sizeof(*ids));
        char *at_eof = calloc((size_t)n_partitions, 1); /* indexed by position in `ids` */
        int32_t max_id = 0;
        for (int i = 0; i < n_partitions; i++) {
                ids[i] = md->topics[0].partitions[i].id;
                if (ids[i] > max_id)
                        max_id = ids[i];
        }
        rd_kafka_metadata_destroy(md);
        int *index_of = malloc(((size_t)max_id + 1) * sizeof(*index_of)); /* partition id -> index */
        rd_kafka_message_t **msgs = malloc(CONSUME_BATCH * sizeof(*msgs));
        if (!ids || !at_eof || !index_of || !msgs) {
                fprintf(stderr, "rdkperf: out of memory\n");
                return 1;
        }
        for (int32_t id = 0; id <= max_id; id++)
                index_of[id] = -1;
        for (int i = 0; i < n_partitions; i++)
                index_of[ids[i]] = i;

        rd_kafka_queue_t *queue = rd_kafka_queue_new(rk);
        for (int i = 0; i < n_partitions; i++) {
                if (rd_kafka_consume_start_queue(rkt, ids[i], RD_KAFKA_OFFSET_BEGINNING, queue) == -1) {
                        fprintf(stderr, "rdkperf: consume_start %s [%" PRId32 "]: %s\n", o->topic, ids[i],
                                rd_kafka_err2str(rd_kafka_last_error()));
                        return 1;
                }
        }

        long long records = 0, bytes = 0, errors = 0, calls = 0;
        int eofs = 0;
        double t_first = 0, t_last = 0, t_progress = now_s();
        int failed = 0;
        while (records < o->count && !failed) {
                /* the call waits until it has `want` messages or times out: asking for no more
                 * than are still to come keeps it from idling at the end, and asking for one at
                 * first makes t_first the time the first record arrived */
                long long left = o->count - records;
                size_t want = records == 0 ? 1 : (size_t)(left < CONSUME_BATCH ? left : CONSUME_BATCH);
                ssize_t n = rd_kafka_consume_batch_queue(queue, 100, msgs, want);
                if (n < 0) {
                        fprintf(stderr, "rdkperf: consume_batch_queue: %s\n",
                                rd_kafka_err2str(rd_kafka_last_error()));
                        failed = 1;
                        break;
                }
                double t = now_s();
                if (n == 0) {
                        if (o->timeout_s > 0 && t - t_progress > o->timeout_s) {
                                fprintf(stderr, "rdkperf: no record for %.0f s after %lld of %lld\n",
                                        o->timeout_s, records, o->count);
                                failed = 1;
                        }
                        continue;
                }
                calls++;
                t_progress = t;
                for (ssize_t i = 0; i < n; i++) {
                        rd_kafka_message_t *m = msgs[i];
                        int idx = m->partition >= 0 && m->partition <= max_id ? index_of[m->partition] : -1;
                        if (!m->err) {
                                if (records < o->count) {
                                        records++;
                                        bytes += (long long)m->len;
                                }
                                if (idx >= 0 && at_eof[idx]) {
                                        at_eof[idx] = 0; /* more arrived after its end */
                                        eofs--;
                                }
                        } else if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                                if (idx >= 0 && !at_eof[idx]) {
                                        at_eof[idx] = 1;
                                        eofs++;
                                }
                        } else {
                                if (errors++ < MAX_PRINTED_ERRORS)
                                        fprintf(stderr, "rdkperf: %s [%" PRId32 "]: %s\n", o->topic,
                                                m->partition, rd_kafka_message_errstr(m));
                        }
                        rd_kafka_message_destroy(m);
                }
                if (records > 0 && t_first == 0)
                        t_first = t;
                t_last = t;
                if (eofs == n_partitions && records < o->count) {
                        fprintf(stderr, "rdkperf: every partition of %s ended after %lld of %lld records\n",
                                o->topic, records, o->count);
                        failed = 1;
                }
        }
        double t_end = now_s();

        for (int i = 0; i < n_partitions; i++)
                rd_kafka_consume_stop(rkt, ids[i]);
        rd_kafka_queue_destroy(queue);
        rd_kafka_topic_destroy(rkt);
        rd_kafka_destroy(rk);
        free(msgs);
        free(index_of);
        free(at_eof);
        free(ids);

        printf("{\"mode\":\"consume\",\"records\":%lld,\"bytes\":%lld,\"seconds\":%.6f,"
               "\"seconds_from_start\":%.6f,\"errors\":%lld,\"partitions\":%d,\"batches\":%lld,"
               "\"librdkafka\":\"%s\"}\n",
               records, bytes, t_last - t_first, t_end - t_start, errors, n_partitions, calls,
               rd_kafka_version_str());
        return failed || errors ? 1 : 0;
}

/* ---------------------------------------------------------------------------------- produce */

static const char *const PRODUCE_DEFAULTS[] = {
        /* as bench/loadgen.py kcat_produce: what a throughput-minded producer sets */
        "acks", "1",
        "linger.ms", "5",
        "batch.size", "1000000",
        "compression.type", "none",
        "queue.buffering.max.messages", "2000000",
        "queue.buffering.max.kbytes", "2097151",
        "enable.idempotence", "false",
        /* delivery reports for failures only: a report per record would be per-record work */
        "delivery.report.only.error", "true",
        NULL,
};

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk;
        (void)opaque;
        if (m->err && delivery_errors++ < MAX_PRINTED_ERRORS)
                fprintf(stderr, "rdkperf: delivery failed: %s\n", rd_kafka_err2str(m->err));
}

/* POOL_SPAN + size bytes of random letters (xorshift64*; the letters are what loadgen.py's
 * make_input writes: any byte maps to one of 52, about 5.7 bits of entropy per byte). */
static char *make_pool(size_t size) {
        static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        size_t len = POOL_SPAN + size;
        char *pool = malloc(len);
        if (!pool)
                return NULL;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
        x |= 1;
        for (size_t i = 0; i < len;) {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                uint64_t r = x * 0x2545F4914F6CDD1DULL;
                for (int k = 0; k < 8 && i < len; k++, i++, r >>= 8)
                        pool[i] = letters[(r & 0xff) % 52];
        }
        return pool;
}

static int produce(const struct options *o) {
        double t_start = now_s();
        size_t size = (size_t)o->record_size;
        char *pool = make_pool(size);
        if (!pool) {
                fprintf(stderr, "rdkperf: out of memory for a %zu byte payload pool\n", POOL_SPAN + size);
                return 1;
        }
        rd_kafka_conf_t *conf = make_conf(o, PRODUCE_DEFAULTS);
        rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
        rd_kafka_t *rk = make_client(RD_KAFKA_PRODUCER, conf);
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);
        if (!rkt) {
                fprintf(stderr, "rdkperf: topic %s: %s\n", o->topic, rd_kafka_err2str(rd_kafka_last_error()));
                return 1;
        }

        rd_kafka_message_t *batch = calloc(PRODUCE_BATCH, sizeof(*batch));
        if (!batch) {
                fprintf(stderr, "rdkperf: out of memory\n");
                return 1;
        }
        /* explicit partitions ride in each message (RD_KAFKA_MSG_F_PARTITION); without -p every
         * message goes to RD_KAFKA_PARTITION_UA, i.e. the partitioner (sticky for null keys) */
        int flags = o->partitions > 0 ? RD_KAFKA_MSG_F_PARTITION : 0; /* no copy, no free */
        long long queue_full = 0, produced = 0, next = 0;
        int pending = 0; /* batch[0..pending) still to hand over */
        int failed = 0;
        size_t offset = 0;
        double t_first = now_s();
        while ((next < o->count || pending) && !failed) {
                for (; pending < PRODUCE_BATCH && next < o->count; pending++, next++) {
                        rd_kafka_message_t *m = &batch[pending];
                        m->payload = pool + offset;
                        m->len = size;
                        m->key = NULL;
                        m->key_len = 0;
                        m->_private = NULL;
                        m->partition = o->partitions > 0 ? (int32_t)(next % o->partitions) : RD_KAFKA_PARTITION_UA;
                        offset += size;
                        if (offset >= POOL_SPAN)
                                offset -= POOL_SPAN;
                }
                for (int i = 0; i < pending; i++)
                        batch[i].err = RD_KAFKA_RESP_ERR_NO_ERROR;
                int sent = rd_kafka_produce_batch(rkt, RD_KAFKA_PARTITION_UA, flags, batch, pending);
                produced += sent;
                if (sent == pending) {
                        pending = 0;
                        rd_kafka_poll(rk, 0); /* serve (error) delivery reports */
                        continue;
                }
                /* keep the refused messages for the next call; a full queue drains as librdkafka
                 * sends, any other refusal is fatal */
                int kept = 0;
                for (int i = 0; i < pending && !failed; i++) {
                        rd_kafka_resp_err_t err = batch[i].err;
                        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                                batch[kept++] = batch[i];
                        else if (err) {
                                fprintf(stderr, "rdkperf: produce: %s\n", rd_kafka_err2str(err));
                                failed = 1;
                        }
                }
                if (kept != pending - sent && !failed) {
                        fprintf(stderr, "rdkperf: produce_batch took %d of %d but flagged %d\n", sent, pending,
                                pending - kept);
                        failed = 1;
                }
                pending = kept;
                if (kept) {
                        queue_full++;
                        rd_kafka_poll(rk, 1);
                }
        }
        int timeout_ms = o->timeout_s > 0 ? (int)(o->timeout_s * 1000) : 600000;
        rd_kafka_resp_err_t err = rd_kafka_flush(rk, timeout_ms);
        double t_end = now_s();
        int left = rd_kafka_outq_len(rk);
        if (err || left) {
                fprintf(stderr, "rdkperf: flush: %s, %d messages/requests still queued\n", rd_kafka_err2str(err),
                        left);
                failed = 1;
        }
        rd_kafka_topic_destroy(rkt);
        rd_kafka_destroy(rk);
        free(batch);
        free(pool);

        long long records = produced - delivery_errors - left;
        printf("{\"mode\":\"produce\",\"records\":%lld,\"bytes\":%lld,\"seconds\":%.6f,"
               "\"seconds_from_start\":%.6f,\"errors\":%lld,\"record_size\":%zu,\"partitions\":%d,"
               "\"queue_full\":%lld,\"first_mono\":%.6f,\"end_mono\":%.6f,\"librdkafka\":\"%s\"}\n",
               records, records * (long long)size, t_end - t_first, t_end - t_start, delivery_errors, size,
               o->partitions, queue_full, t_first, t_end, rd_kafka_version_str());
        return failed || delivery_errors ? 1 : 0;
}

int main(int argc, char **argv) {
        struct options o = {0};
        o.timeout_s = 60;
        parse_args(argc, argv, &o);
        return strcmp(o.mode, "consume") == 0 ? consume(&o) : produce(&o);
}
