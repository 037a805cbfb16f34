// test_data: shards, streams, the global-batch loader, the built-in corpus, and
// build/prepare run as a user runs it (found next to this test program).
#include "data.h"
#include "test/test.h"
#include <sys/syscall.h>

static char tmp_dir[4096];   // mkdtemp, removed at the end
static char tool_dir[4096];  // where build/prepare lives: next to argv[0]

static const char *tmp_path(const char *name) {  // 8 rotating buffers
    static char bufs[8][4200];
    static int k = 0;
    char *p = bufs[k++ % 8];
    snprintf(p, 4200, "%s/%s", tmp_dir, name);
    return p;
}

static void write_text(const char *path, const char *s) { test_write_file(path, s, strlen(s)); }

static char *read_all(const char *path, size_t *n) {  // NUL-terminated; NULL if missing
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = (char *)mallocCheck((size_t)size + 1);
    if (fread(p, 1, (size_t)size, f) != (size_t)size) { perror(path); exit(1); }
    fclose(f);
    if (n) *n = (size_t)size;
    return p;
}
static int file_exists(const char *path) { return access(path, F_OK) == 0; }
static int file_contains(const char *path, const char *needle) {
    char *s = read_all(path, NULL);
    int found = s && strstr(s, needle) != NULL;
    free(s);
    return found;
}

// ----------------------------------------------------------------------------
// Shards

static void test_shard_roundtrip(void) {
    size_t sizes[] = {0, 1, 7, 8, 13, (1 << 20) + 13, 3 << 20};
    uint64_t rng = 42;
    for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
        size_t n = sizes[k];
        uint8_t *data = (uint8_t *)mallocCheck(n + 1);
        for (size_t i = 0; i < n; i++) data[i] = (uint8_t)rng_next(&rng);
        const char *path = tmp_path("round.bin");
        shard_write(path, data, n, k % 2 ? SHARD_FRAMED : 0);
        Shard sh;
        shard_open(&sh, path, 1);
        int same = sh.size == (int64_t)n && (n == 0 || memcmp(sh.data, data, n) == 0);
        CHECK(same && sh.flags == (k % 2 ? SHARD_FRAMED : 0u), "shard of %zu bytes reads back whole (size %lld, flags %u)",
              n, (long long)sh.size, sh.flags);
        struct stat st;
        stat(path, &st);
        CHECK(st.st_size == (off_t)(n + SHARD_HEADER_BYTES), "file is header + payload: %lld bytes", (long long)st.st_size);
        shard_close(&sh);
        free(data);
    }
    // the header layout in doc/formats.md, field by field, on a known payload
    shard_write(tmp_path("abc.bin"), "abc", 3, SHARD_FRAMED);
    size_t n;
    uint8_t *b = (uint8_t *)read_all(tmp_path("abc.bin"), &n);
    uint32_t version, flags; uint64_t size, sum;
    memcpy(&version, b + 8, 4); memcpy(&flags, b + 12, 4); memcpy(&size, b + 16, 8); memcpy(&sum, b + 24, 8);
    CHECK(n == 35 && !memcmp(b, "MLSTMSHD", 8) && version == 1 && flags == 1 && size == 3 &&
          sum == checksum_final(checksum_update(CHECKSUM_INIT, "abc", 3)) && !memcmp(b + 32, "abc", 3),
          "header: magic, version 1, flags 1, length 3, checksum %016llx", (unsigned long long)sum);
    free(b);
}

static void open_shard_child(void *path) { alarm(10); Shard sh; shard_open(&sh, (const char *)path, 1); }  // a hang ends as SIGALRM

// Opens a 64 KB shard, truncates its file to 100 bytes (as a rerun of prepare into the
// same directory could), then reads past the new end: the mapping raises SIGBUS.
static void truncated_while_open_child(void *path) {
    Stream s;
    const char *p = (const char *)path;
    stream_open(&s, &p, 1, 1);
    if (truncate(p, 100) != 0) { perror("truncate"); exit(1); }
    uint8_t buf[16];
    stream_read(&s, 60000, 16, buf);
    exit(0);
}

static void test_shard_errors(void) {
    char want[4400];
    uint8_t payload[100];
    for (int i = 0; i < 100; i++) payload[i] = (uint8_t)i;
    shard_write(tmp_path("good.bin"), payload, 100, 0);
    size_t n;
    uint8_t *good = (uint8_t *)read_all(tmp_path("good.bin"), &n);

    const char *missing = tmp_path("missing.bin");
    snprintf(want, sizeof want, "cannot open shard %s: No such file", missing);
    EXPECT_EXIT(open_shard_child, (void *)missing, 2, want, "missing shard");

    const char *empty = tmp_path("empty.bin");
    test_write_file(empty, "", 0);
    snprintf(want, sizeof want, "%s: empty file", empty);
    EXPECT_EXIT(open_shard_child, (void *)empty, 2, want, "empty shard");

    const char *magic = tmp_path("magic.bin");
    memcpy(good, "MLSTMCKP", 8);
    test_write_file(magic, good, n);
    memcpy(good, SHARD_MAGIC, 8);
    snprintf(want, sizeof want, "%s: not a shard (bad magic", magic);
    EXPECT_EXIT(open_shard_child, (void *)magic, 2, want, "wrong magic");

    const char *shorthdr = tmp_path("shorthdr.bin");
    test_write_file(shorthdr, good, 20);
    snprintf(want, sizeof want, "%s: truncated header", shorthdr);
    EXPECT_EXIT(open_shard_child, (void *)shorthdr, 2, want, "truncated header");

    const char *newer = tmp_path("newer.bin");
    good[8] = 2;
    test_write_file(newer, good, n);
    good[8] = 1;
    snprintf(want, sizeof want, "%s: shard version 2 is newer than this build reads (1)", newer);
    EXPECT_EXIT(open_shard_child, (void *)newer, 2, want, "newer version");

    const char *trunc = tmp_path("trunc.bin");
    test_write_file(trunc, good, n - 10);
    snprintf(want, sizeof want, "%s: truncated payload: the header says 100 bytes, the file holds 90", trunc);
    EXPECT_EXIT(open_shard_child, (void *)trunc, 2, want, "truncated payload");

    const char *longer = tmp_path("longer.bin");
    uint8_t *extra = (uint8_t *)mallocCheck(n + 5);
    memcpy(extra, good, n);
    test_write_file(longer, extra, n + 5);
    free(extra);
    snprintf(want, sizeof want, "%s: 5 bytes after the payload", longer);
    EXPECT_EXIT(open_shard_child, (void *)longer, 2, want, "trailing bytes");

    const char *flagged = tmp_path("flagged.bin");
    good[12] = 0x03;  // bit 1: undefined in version 1
    test_write_file(flagged, good, n);
    good[12] = 0;
    snprintf(want, sizeof want, "%s: unknown flag bits 0x2 in the header", flagged);
    EXPECT_EXIT(open_shard_child, (void *)flagged, 2, want, "unknown flag bits");

    const char *fifo = tmp_path("fifo.bin");
    if (mkfifo(fifo, 0600) == 0) {
        snprintf(want, sizeof want, "%s: not a regular file", fifo);
        EXPECT_EXIT(open_shard_child, (void *)fifo, 2, want, "a FIFO as a shard (it hung in open)");
    } else CHECK(0, "mkfifo %s: %s", fifo, strerror(errno));
    const char *dir = tmp_path("dir.bin");
    mkdir(dir, 0700);
    snprintf(want, sizeof want, "%s: not a regular file", dir);
    EXPECT_EXIT(open_shard_child, (void *)dir, 2, want, "a directory as a shard");

    const char *shrinking = tmp_path("shrinking.bin");
    uint8_t *big = (uint8_t *)mallocCheck(1 << 16);
    shard_write(shrinking, big, 1 << 16, 0);
    free(big);
    snprintf(want, sizeof want, "error: %s was truncated or replaced while being read (SIGBUS)", shrinking);
    EXPECT_EXIT(truncated_while_open_child, (void *)shrinking, 2, want, "a shard truncated while it is read");

    const char *corrupt = tmp_path("corrupt.bin");
    good[SHARD_HEADER_BYTES + 57] ^= 0x10;
    test_write_file(corrupt, good, n);
    snprintf(want, sizeof want, "%s: checksum mismatch", corrupt);
    EXPECT_EXIT(open_shard_child, (void *)corrupt, 2, want, "checksum mismatch");
    Shard sh;
    shard_open(&sh, corrupt, 0);
    CHECK(sh.size == 100 && sh.data[57] == (57 ^ 0x10), "verify = 0 skips the checksum and maps the payload");
    shard_close(&sh);
    free(good);
}

// A writer that dies before closing leaves no file under the final name.
static void die_mid_write(void *path) {
    ShardWriter w;
    shard_writer_open(&w, (const char *)path, 0);
    shard_writer_append(&w, "half a shard", 12);
    fflush(w.af.f);
    _exit(3);
}
static void write_into_missing_dir(void *path) { shard_write((const char *)path, "x", 1, 0); }

static void test_shard_atomic(void) {
    const char *path = tmp_path("atomic.bin");
    shard_write(path, "old", 3, 0);
    EXPECT_EXIT(die_mid_write, (void *)path, 3, "", "a writer killed before it commits");
    Shard sh;
    shard_open(&sh, path, 1);
    CHECK(sh.size == 3 && memcmp(sh.data, "old", 3) == 0, "the old shard is still whole after a killed write");
    shard_close(&sh);
    test_system("rm -f '%s'.tmp.*", path);  // what the killed writer left
    const char *bad = tmp_path("no/such/dir/x.bin");
    char want[4400];
    snprintf(want, sizeof want, "cannot write %s: No such file or directory", bad);
    EXPECT_EXIT(write_into_missing_dir, (void *)bad, 2, want, "shard into a missing directory");
    CHECK(!file_exists(bad), "and nothing was written");
}

// ----------------------------------------------------------------------------
// Streams and the loader

static void test_stream_read(void) {
    int64_t sizes[4] = {5, 0, 1000, 3};
    uint8_t all[1008];
    const char *paths[4];
    int64_t off = 0;
    uint64_t rng = 7;
    for (int k = 0; k < 4; k++) {
        for (int64_t i = 0; i < sizes[k]; i++) all[off + i] = (uint8_t)rng_next(&rng);
        char name[32];
        snprintf(name, sizeof name, "s%d.bin", k);
        paths[k] = tmp_path(name);
        shard_write(paths[k], all + off, (size_t)sizes[k], SHARD_FRAMED);
        off += sizes[k];
    }
    Stream s;
    stream_open(&s, paths, 4, 1);
    CHECK(s.size == 1008 && s.n_shards == 4 && s.framed, "stream of 4 shards: %lld bytes", (long long)s.size);
    int ok = 1;
    uint8_t buf[1008];
    for (int64_t a = 0; a < 1008; a += 1)
        for (int64_t len = 0; a + len <= 1008; len += 1 + len * 3) {
            stream_read(&s, a, len, buf);
            if (memcmp(buf, all + a, (size_t)len) != 0) ok = 0;
        }
    CHECK(ok, "stream_read across shard boundaries (an empty shard included) matches the concatenation");
    stream_free(&s);
}

// Streams whose bytes spell their own offsets (low byte in one, high byte in the other)
// let the test recover, from loader output alone, which offset every byte came from.
static void make_position_streams(Stream *lo, Stream *hi, int64_t n) {
    uint8_t *a = (uint8_t *)mallocCheck((size_t)n), *b = (uint8_t *)mallocCheck((size_t)n);
    for (int64_t i = 0; i < n; i++) { a[i] = (uint8_t)(i & 255); b[i] = (uint8_t)(i >> 8); }
    stream_from_memory(lo, a, n, 0);
    stream_from_memory(hi, b, n, 0);
}

// Runs one epoch for every rank; returns 0 on the first disagreement with the
// contract in data.h, and counts how often each offset was an input.
static int check_epoch(int64_t N, int world, int B, int T, char *why, size_t why_cap) {
    Stream lo, hi;
    make_position_streams(&lo, &hi, N);
    int64_t G = (int64_t)world * B, slice = (N - 1) / G;
    long steps = 0;
    int *count = (int *)mallocCheck((size_t)N * sizeof(int));
    uint8_t *in_lo = (uint8_t *)mallocCheck((size_t)B * T), *in_hi = (uint8_t *)mallocCheck((size_t)B * T);
    uint8_t *tg_lo = (uint8_t *)mallocCheck((size_t)B * T), *tg_hi = (uint8_t *)mallocCheck((size_t)B * T);
    uint8_t *again = (uint8_t *)mallocCheck((size_t)B * T), *scratch = (uint8_t *)mallocCheck((size_t)B * T);
    int ok = 1;
    for (int rank = 0; rank < world && ok; rank++) {
        Loader l_lo, l_hi;
        loader_init(&l_lo, &lo, world, rank, B, T, "the data");
        loader_init(&l_hi, &hi, world, rank, B, T, "the data");
        steps = loader_steps_per_epoch(&l_lo);
        if (steps != slice / T) { snprintf(why, why_cap, "steps %ld, want %lld", steps, (long long)(slice / T)); ok = 0; break; }
        for (long s = 0; s < steps && ok; s++) {
            loader_batch(&l_lo, s, in_lo, tg_lo, NULL);
            loader_batch(&l_hi, s, in_hi, tg_hi, NULL);
            loader_batch(&l_lo, s + 2 * steps, again, scratch, NULL);  // epoch 2 repeats epoch 0
            if (memcmp(again, in_lo, (size_t)B * T) != 0) { snprintf(why, why_cap, "epoch 2 differs"); ok = 0; }
            for (int b = 0; b < B && ok; b++)
                for (int t = 0; t < T; t++) {
                    int64_t pos = in_lo[b * T + t] | (int64_t)in_hi[b * T + t] << 8;
                    int64_t tpos = tg_lo[b * T + t] | (int64_t)tg_hi[b * T + t] << 8;
                    int64_t want = (rank * B + b) * slice + s * T + t;
                    if (pos != want || tpos != pos + 1) {
                        snprintf(why, why_cap, "rank %d row %d step %ld t %d: input from %lld, target from %lld; want %lld, %lld",
                                 rank, b, s, t, (long long)pos, (long long)tpos, (long long)want, (long long)want + 1);
                        ok = 0; break;
                    }
                    count[pos]++;
                }
        }
    }
    // every byte an input at most once; the ones never read are exactly the remainder
    int64_t read = 0;
    for (int64_t i = 0; i < N && ok; i++) {
        int64_t g = i / slice, in_slice = i % slice;
        int remainder = g >= G || in_slice >= steps * T;
        if (count[i] != (remainder ? 0 : 1)) {
            snprintf(why, why_cap, "byte %lld read %d times (remainder: %d)", (long long)i, count[i], remainder);
            ok = 0;
        }
        read += count[i];
    }
    if (ok && read != G * steps * T) { snprintf(why, why_cap, "%lld inputs, want %lld", (long long)read, (long long)(G * steps * T)); ok = 0; }
    if (ok && (N - 1) % (G * T) == 0 && read != N - 1) { snprintf(why, why_cap, "exact fit read %lld of %lld", (long long)read, (long long)N); ok = 0; }
    free(count); free(in_lo); free(in_hi); free(tg_lo); free(tg_hi); free(again); free(scratch);
    stream_free(&lo); stream_free(&hi);
    return ok;
}

static void test_loader_coverage(void) {
    int worlds[] = {1, 2, 3}, Bs[] = {1, 2, 5}, Ts[] = {1, 3, 8};
    int64_t Ns[] = {241, 1000, 4097};  // 241 = 1 + 2*3*5*8: an exact fit for world 3, B 5, T 8... and others
    int all_ok = 1, n_configs = 0;
    char why[256] = "";
    for (int w = 0; w < 3; w++) for (int b = 0; b < 3; b++) for (int t = 0; t < 3; t++) for (int n = 0; n < 3; n++) {
        if (Ns[n] - 1 < (int64_t)worlds[w] * Bs[b] * Ts[t]) continue;
        n_configs++;
        if (all_ok && !check_epoch(Ns[n], worlds[w], Bs[b], Ts[t], why, sizeof why)) {
            all_ok = 0;
            CHECK(0, "N %lld world %d B %d T %d: %s", (long long)Ns[n], worlds[w], Bs[b], Ts[t], why);
        }
    }
    CHECK(all_ok, "%d configs (world 1-3, B 1-5, T 1-8, N 241/1000/4097): every input is its row's slice at s*T, "
                  "read once per epoch; the remainder is never read; epochs repeat", n_configs);
    // the documented remainder for one case: N = 1000, G = 3, T = 8: slice 333, 41 steps,
    // 5 bytes at the end of each slice and the last byte of the stream are not inputs
    Stream lo, hi;
    make_position_streams(&lo, &hi, 1000);
    Loader l;
    loader_init(&l, &lo, 3, 0, 1, 8, "the data");
    CHECK(l.slice == 333 && loader_steps_per_epoch(&l) == 41 && 82 / loader_steps_per_epoch(&l) == 2,
          "N 1000, G 3, T 8: slice %lld, %ld steps per epoch", (long long)l.slice, loader_steps_per_epoch(&l));
    // two ranks of B rows read exactly what one rank of 2B rows reads
    Loader one, r0, r1;
    loader_init(&one, &lo, 1, 0, 4, 8, "the data");
    loader_init(&r0, &lo, 2, 0, 2, 8, "the data");
    loader_init(&r1, &lo, 2, 1, 2, 8, "the data");
    uint8_t a[32], at[32], b[32], bt[32];
    int same = 1;
    for (long s = 0; s < 40; s++) {
        loader_batch(&one, s, a, at, NULL);
        loader_batch(&r0, s, b, bt, NULL);
        loader_batch(&r1, s, b + 16, bt + 16, NULL);
        same &= !memcmp(a, b, 32) && !memcmp(at, bt, 32);
    }
    CHECK(same, "world 2 x B 2 reads the same rows as world 1 x B 4, step by step");
    stream_free(&lo); stream_free(&hi);
}

static void loader_too_short_child(void *arg) {
    (void)arg;
    Stream s;
    stream_from_memory(&s, (uint8_t *)mallocCheck(100), 100, 0);
    Loader l;
    loader_init(&l, &s, 2, 0, 8, 8, "the data");
}

static void test_loader_resets(void) {
    // shards: "\n ab \n cd ", "efg", "\n hij " -> one stream of 19 bytes
    const char *texts[3] = {"\n ab \n cd ", "efg", "\n hij "};
    const char *paths[3];
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "r%d.bin", k);
        paths[k] = tmp_path(name);
        shard_write(paths[k], texts[k], strlen(texts[k]), k == 1 ? 0 : SHARD_FRAMED);
    }
    Stream s;
    stream_open(&s, paths, 3, 1);
    CHECK(s.size == 19 && !s.framed, "a stream is framed only if every shard is (size %lld)", (long long)s.size);
    Loader l;
    loader_init(&l, &s, 1, 0, 1, 6, "the data");  // slice 18, 3 steps: inputs 0-5, 6-11, 12-17
    CHECK(l.reset_docs == 0, "an unframed shard turns document resets off by default");
    l.reset_docs = 1;
    uint8_t in[64], tg[64], r[64];  // (1, 6) used; larger keeps gcc's vectoriser from warning
    char got[64] = "", one[8];
    for (long step = 0; step < 4; step++) {  // step 3 = epoch 1, step 0 again
        loader_batch(&l, step, in, tg, r);
        for (int t = 0; t < 6; t++) { snprintf(one, sizeof one, "%d", r[t]); strcat(got, one); }
        strcat(got, "|");
    }
    // step 0 "\n ab \n": epoch start + '\n' at 0, '\n' at 5; step 1 " cd efg": shard 1 starts at 10 (t 4);
    // step 2 "g\n hij": shard 2 and a document start at 13 (t 1); step 3 = step 0
    CHECK(strcmp(got, "100001|000010|010000|100001|") == 0, "reset mask with documents: %s", got);
    l.reset_docs = 0;
    got[0] = 0;
    for (long step = 0; step < 3; step++) {
        loader_batch(&l, step, in, tg, r);
        for (int t = 0; t < 6; t++) { snprintf(one, sizeof one, "%d", r[t]); strcat(got, one); }
        strcat(got, "|");
    }
    CHECK(strcmp(got, "100000|000010|010000|") == 0, "reset mask without documents (epoch and shard starts): %s", got);
    stream_free(&s);
    EXPECT_EXIT(loader_too_short_child, NULL, 2, "the data has 100 bytes, too few for 16 rows of 8+1 bytes (need at least 129)",
                "a stream too short for the batch");
}

// A stream of more than 4 GB: a sparse shard (no disk used), read without verifying
// the checksum, which would read 4.3 GB of zeros.
static void test_stream_over_4gb(void) {
    const char *small = tmp_path("small.bin"), *big = tmp_path("big.bin");
    shard_write(small, "0123456789", 10, 0);
    int64_t payload = (1LL << 32) + 12345;
    uint8_t header[SHARD_HEADER_BYTES];
    shard_header_pack(header, 0, (uint64_t)payload, 0);
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int ok = fd >= 0 && ftruncate(fd, SHARD_HEADER_BYTES + payload) == 0 &&
             pwrite(fd, header, sizeof header, 0) == (ssize_t)sizeof header;
    // markers: at 2^32 - 1 .. 2^32 + 2 of the payload, and its last byte
    ok = ok && pwrite(fd, "ABCD", 4, SHARD_HEADER_BYTES + (1LL << 32) - 1) == 4 &&
         pwrite(fd, "Z", 1, SHARD_HEADER_BYTES + payload - 1) == 1;
    if (fd >= 0) close(fd);
    if (!ok) { CHECK(0, "cannot make a sparse 4 GB file in %s: %s", tmp_dir, strerror(errno)); return; }
    const char *paths[2] = {small, big};
    Stream s;
    stream_open(&s, paths, 2, 0);
    CHECK(s.size == 10 + payload, "stream size %lld = 10 + 2^32 + 12345", (long long)s.size);
    uint8_t buf[16];
    stream_read(&s, 10 + (1LL << 32) - 1, 4, buf);
    int found = !memcmp(buf, "ABCD", 4);
    stream_read(&s, s.size - 1, 1, buf);
    found &= buf[0] == 'Z';
    stream_read(&s, 8, 4, buf);
    found &= !memcmp(buf, "89\0\0", 4);
    CHECK(found, "bytes at stream offsets 2^32+9 and %lld read back", (long long)s.size - 1);
    // the loader at 64-bit offsets: row 1 of 2 starts at slice = (N-1)/2; pick the step
    // whose inputs start at stream offset 10 + 2^32 - 1
    Loader l;
    loader_init(&l, &s, 1, 0, 2, 4, "the data");
    int64_t target = 10 + (1LL << 32) - 1 - l.slice;
    long step = (long)(target / 4);
    int t0 = (int)(target % 4);
    uint8_t in[8], tg[8], r[8];
    loader_batch(&l, step, in, tg, r);
    CHECK(l.steps_per_epoch > (1L << 29) && in[4 + t0] == 'A' && tg[4 + t0] == 'B',
          "loader row 1, step %ld reads 'A' then target 'B' beyond 4 GB (got %d, %d)", step, in[4 + t0], tg[4 + t0]);
    loader_batch(&l, 0, in, tg, r);
    CHECK(r[0] == 1 && r[4] == 1 && !memcmp(in, "0123", 4), "epoch start resets both rows");
    stream_free(&s);
    unlink(big);
}

// ----------------------------------------------------------------------------
// The built-in corpus

static int count_of(const char *text, const char *const *words, int n) {
    int c = 0;
    for (int i = 0; i < n; i++)
        for (const char *p = strstr(text, words[i]); p; p = strstr(p + 1, words[i])) c++;
    return c;
}

static void test_corpus(void) {
    static const char *const good[] = {"excellent", "amazing", "perfect", "love", "recommend it", "buy again", "reliable", "sturdy"};
    static const char *const bad[] = {"terrible", "awful", "useless", "broke", "Save your money", "returning", "flimsy", "regret"};
    uint64_t rng = 123;
    char text[CORPUS_DOC_MAX];
    int n_docs = 3000, hist[6] = {0}, clean = 1;
    double score[6] = {0};
    size_t max_len = 0;
    for (int i = 0; i < n_docs; i++) {
        size_t len;
        int stars = corpus_document(&rng, text, sizeof text, &len);
        if (stars < 1 || stars > 5 || strlen(text) != len) { clean = 0; break; }
        hist[stars]++;
        score[stars] += count_of(text, good, 8) - count_of(text, bad, 8);
        if (len > max_len) max_len = len;
        for (size_t k = 0; k < len; k++) if (text[k] < 32 || text[k] > 126) clean = 0;
    }
    CHECK(clean && max_len < CORPUS_DOC_MAX - 1, "documents are printable ASCII, one line, longest %zu bytes", max_len);
    int monotone = 1;
    for (int s = 1; s <= 5; s++) { score[s] /= hist[s] ? hist[s] : 1; if (s > 1 && score[s] <= score[s - 1]) monotone = 0; }
    CHECK(monotone && hist[1] > 100 && hist[3] > 100 && hist[5] > hist[4],
          "sentiment agrees with stars: mean (good - bad words) %.2f %.2f %.2f %.2f %.2f for 1-5 stars (%d %d %d %d %d docs)",
          score[1], score[2], score[3], score[4], score[5], hist[1], hist[2], hist[3], hist[4], hist[5]);

    Stream a, b, v;
    corpus_stream(&a, 100000, 7, 0);
    corpus_stream(&b, 100000, 7, 0);
    corpus_stream(&v, 100000, 7, 1);
    const uint8_t *p = a.shards[0].data;
    CHECK(a.size == 100000 && a.framed && !memcmp(p, b.shards[0].data, 100000), "corpus_stream is deterministic, exactly 100000 bytes, framed");
    CHECK(memcmp(p, v.shards[0].data, 1000) != 0, "train and val draw different documents");
    int framing = p[0] == '\n' && p[1] == ' ';
    int n_newlines = 0;
    for (int64_t i = 1; i < a.size; i++)
        if (p[i] == '\n') { n_newlines++; framing &= p[i - 1] == ' ' && p[i - 2] != ' ' && (i + 1 >= a.size || p[i + 1] == ' '); }
    CHECK(framing && n_newlines > 300, "documents are framed \"\\n \" text \" \" (%d documents)", n_newlines);
    Loader l;
    loader_init(&l, &a, 1, 0, 4, 64, "the data");
    CHECK(l.reset_docs == 1, "the built-in corpus resets the state at document starts by default");
    stream_free(&a); stream_free(&b); stream_free(&v);
}

// ----------------------------------------------------------------------------
// build/prepare, as a user runs it

static int prepare(const char *args, const char *out_name) {  // stdout+stderr to log.txt
    return test_system("cd '%s' && '%s/prepare' %s -o '%s' > log.txt 2>&1", tmp_dir, tool_dir, args, out_name);
}

// Reads a split back through the stream and the labels file: returns the number of
// documents and concatenates "label:text;" for each into out (stream order).
static int64_t read_split(const char *dir, const char *split, char *out, size_t cap, int *consistent) {
    Stream s;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s_000.bin", dir, split);
    out[0] = 0;
    *consistent = 0;
    if (!file_exists(path)) return 0;  // a check fails; the other tests go on
    stream_open_dir(&s, dir, split, 1);
    snprintf(path, sizeof path, "%s/%s_labels.tsv", dir, split);
    char *tsv = read_all(path, NULL);
    *consistent = tsv && strncmp(tsv, "offset\tlength\tlabel\n", 20) == 0 && s.framed;
    int64_t n = 0, expect_off = 0;
    out[0] = 0;
    for (char *line = tsv ? strchr(tsv, '\n') + 1 : NULL; line && *line; n++) {
        long long off, len;
        char label[64];
        if (sscanf(line, "%lld\t%lld\t%63s", &off, &len, label) != 3) { *consistent = 0; break; }
        char *doc = (char *)mallocCheck((size_t)len + 1);
        stream_read(&s, off, len, (uint8_t *)doc);
        if (off != expect_off || doc[0] != '\n' || doc[1] != ' ' || doc[len - 1] != ' ' || memchr(doc + 1, '\n', (size_t)len - 1))
            *consistent = 0;
        expect_off = off + len;
        doc[len - 1] = 0;
        size_t k = strlen(out);
        snprintf(out + k, cap - k, "%s:%s;", label, doc + 2);
        free(doc);
        line = strchr(line, '\n');
        if (line) line++;
    }
    if (expect_off != s.size) *consistent = 0;
    free(tsv);
    stream_free(&s);
    return n;
}

// out contains each "label:text;" of want exactly once (want is ';'-separated)
static int has_each_once(const char *all, const char *want) {
    char item[512];
    for (const char *p = want; *p;) {
        const char *e = strchr(p, ';');
        size_t n = (size_t)(e - p) + 1;
        memcpy(item, p, n); item[n] = 0;
        const char *hit = strstr(all, item);
        if (!hit || strstr(hit + 1, item)) return 0;
        p = e + 1;
    }
    return 1;
}

static void test_prepare_jsonl(void) {
    char buf[8192], all[16384];
    const char *lines =
        "{\"reviewText\": \"Great blender.\", \"overall\": 5.0, \"summary\": \"x\"}\n"
        "{\"reviewText\": \"Broke in a week.\\nAvoid.\", \"overall\": 1.0}\n"
        "{\"reviewText\": \"missing brace\", \"overall\": 2.0\n"
        "\n"
        "{\"summary\": \"no text here\", \"overall\": 3.0}\n"
        "{\"reviewText\": \"caf\\u00e9 \\\"ok\\\"\", \"overall\": 4}\n"
        "{\"reviewText\": \"no label\"}\n"
        "{\"reviewText\": \"fine\", \"overall\": 3.0}\n";
    write_text(tmp_path("r.jsonl"), lines);
    int rc = prepare("--val-fraction 0.4 --seed 5 r.jsonl", "j");
    CHECK(rc == 0, "prepare r.jsonl: exit %d", rc);
    const char *log = tmp_path("log.txt");
    CHECK(file_contains(log, "warning: r.jsonl:3: malformed JSON:") && file_contains(log, "(skipped)"),
          "a malformed JSON line is skipped with a warning naming r.jsonl:3");
    CHECK(file_contains(log, "warning: r.jsonl:5: no text field: no string field \"reviewText\""), "a line without the text field names r.jsonl:5");
    CHECK(file_contains(log, "5 documents: 3 train") && file_contains(log, "2 val") &&
          file_contains(log, "skipped 2 lines: 1 malformed JSON, 1 no text field"), "the summary counts documents and skips");
    int ok_t, ok_v;
    int64_t n_train = read_split(tmp_path("j"), "train", all, sizeof all, &ok_t);
    size_t k = strlen(all);
    int64_t n_val = read_split(tmp_path("j"), "val", all + k, sizeof all - k, &ok_v);
    CHECK(ok_t && ok_v && n_train == 3 && n_val == 2, "train %lld + val %lld documents; labels file offsets match the stream", (long long)n_train, (long long)n_val);
    CHECK(has_each_once(all, "5:Great blender.;1:Broke in a week. Avoid.;4:caf\xc3\xa9 \"ok\";-:no label;3:fine;"),
          "every document once, framed, newline -> space, labels %%g: %s", all);
    // same seed, same bytes; another seed, another order; gzip, same bytes
    size_t n1, n2;
    char *first = read_all(tmp_path("j/train_000.bin"), &n1);
    prepare("--val-fraction 0.4 --seed 5 r.jsonl", "j2");
    char *second = read_all(tmp_path("j2/train_000.bin"), &n2);
    CHECK(first && second && n1 == n2 && !memcmp(first, second, n1), "the same seed writes the same shard");
    free(second);
    prepare("--val-fraction 0.4 --seed 6 r.jsonl", "j3");
    int differs = 0;
    for (int s = 7; s < 40 && !differs; s++) {  // some seed must give another split or order
        snprintf(buf, sizeof buf, "--val-fraction 0.4 --seed %d r.jsonl", s);
        prepare(buf, "j3");
        second = read_all(tmp_path("j3/train_000.bin"), &n2);
        differs = second && (n1 != n2 || memcmp(first, second, n1) != 0);
        free(second);
    }
    CHECK(differs, "another seed shuffles differently");
    if (test_system("cd '%s' && gzip -c r.jsonl > r.jsonl.gz", tmp_dir) == 0) {
        rc = prepare("--val-fraction 0.4 --seed 5 r.jsonl.gz", "jz");
        second = read_all(tmp_path("jz/train_000.bin"), &n2);
        CHECK(rc == 0 && second && n1 == n2 && !memcmp(first, second, n1), "gzip JSON lines give the same shard as plain (exit %d)", rc);
        free(second);
        test_write_file(tmp_path("broken.jsonl.gz"), "\x1f\x8b\x08\x00garbage", 12);
        rc = prepare("broken.jsonl.gz", "jb");
        CHECK(rc == 2 && file_contains(log, "error: broken.jsonl.gz: the gzip data ends early"), "a damaged gzip file: exit %d",
              rc);
    } else {
        SKIP("gzip is not installed: gzip JSON lines untested");
    }
    free(first);
    // --strict: the first bad line is fatal, and no shard appears
    rc = prepare("--strict r.jsonl", "js");
    CHECK(rc == 2 && file_contains(log, "error: r.jsonl:3: malformed JSON:") && file_contains(log, "(--strict)"),
          "--strict: malformed JSON is fatal: exit %d", rc);
    CHECK(!file_exists(tmp_path("js/train_000.bin")), "--strict failure writes no shard");
    // other fields by flag
    write_text(tmp_path("o.json"), "{\"body\": \"one\", \"stars\": \"pos\"}\n{\"body\": \"two\", \"stars\": \"neg\"}\n");
    rc = prepare("--text-field body --label-field stars --val-fraction 0 o.json", "jo");
    int ok;
    n_train = read_split(tmp_path("jo"), "train", all, sizeof all, &ok);
    CHECK(rc == 0 && ok && n_train == 2 && has_each_once(all, "pos:one;neg:two;") && !file_exists(tmp_path("jo/val_000.bin")),
          "--text-field/--label-field, --val-fraction 0 (no val files): %s", all);
}

static void test_prepare_csv(void) {
    char all[8192];
    const char *csv =
        "label,sentence\r\n"
        "0,plain text\r\n"
        "1,\"with, comma\"\r\n"
        "0,\"doubled \"\"quotes\"\"\"\r\n"
        "1,\"two\r\nlines\"\r\n"  // lines 5-6: one record
        "1,bro\"ken\r\n"
        "0,\"closed\"junk\r\n"
        "1,a,b\r\n"
        "1,last\r\n";
    write_text(tmp_path("s.csv"), csv);
    int rc = prepare("--val-fraction 0 s.csv", "c");
    const char *log = tmp_path("log.txt");
    CHECK(rc == 0, "prepare s.csv: exit %d", rc);
    CHECK(file_contains(log, "warning: s.csv:7: malformed CSV: stray quote inside unquoted field 2") &&
          file_contains(log, "warning: s.csv:8: malformed CSV: unexpected 'j' after a closing quote") &&
          file_contains(log, "warning: s.csv:9: malformed CSV: 3 fields, the header has 2") &&
          file_contains(log, "skipped 3 lines: 3 malformed CSV"), "broken quotes and a wrong field count are skipped, naming the line");
    int ok;
    int64_t n = read_split(tmp_path("c"), "train", all, sizeof all, &ok);
    CHECK(ok && n == 5 && has_each_once(all, "0:plain text;1:with, comma;0:doubled \"quotes\";1:two lines;1:last;"),
          "RFC 4180 fields decoded (commas, doubled quotes, a quoted newline): %s", all);
    rc = prepare("--strict s.csv", "cs");
    CHECK(rc == 2 && file_contains(log, "error: s.csv:7: malformed CSV: stray quote"), "--strict: a broken quote is fatal: exit %d", rc);
    write_text(tmp_path("u.csv"), "label,sentence\n1,ok\n0,\"never closed\n1,more\n");
    rc = prepare("u.csv", "cu");
    CHECK(rc == 2 && file_contains(log, "error: u.csv:3: unterminated quoted field: the quote opened on line 3 is never closed"),
          "an unterminated quote is always fatal: exit %d", rc);
    CHECK(!file_exists(tmp_path("cu/train_000.bin")), "and writes no shard");
    write_text(tmp_path("h.csv"), "id,words\n1,hello\n");
    rc = prepare("h.csv", "ch");
    CHECK(rc == 2 && file_contains(log, "error: h.csv:1: no text column"), "a CSV without a known text column: exit %d", rc);
}

static void test_prepare_text_and_errors(void) {
    char all[8192];
    const char *log = tmp_path("log.txt");
    write_text(tmp_path("t.txt"), "first line\nbad \xff byte\n\nover\xc0\xaflong\ngood caf\xc3\xa9\n");
    int rc = prepare("--val-fraction 0 t.txt", "t");
    int ok;
    int64_t n = read_split(tmp_path("t"), "train", all, sizeof all, &ok);
    CHECK(rc == 0 && ok && n == 2 && has_each_once(all, "-:first line;-:good caf\xc3\xa9;"), "plain text: one document per line: %s", all);
    CHECK(file_contains(log, "warning: t.txt:2: invalid UTF-8: byte 0xff at offset 4") &&
          file_contains(log, "warning: t.txt:4: invalid UTF-8: byte 0xc0") && file_contains(log, "2 invalid UTF-8"),
          "invalid UTF-8 (a bad byte, an overlong form) is skipped, naming t.txt:2 and t.txt:4");
    rc = prepare("--strict t.txt", "ts");
    CHECK(rc == 2 && file_contains(log, "error: t.txt:2: invalid UTF-8: byte 0xff at offset 4 of the text (--strict)"),
          "--strict: invalid UTF-8 is fatal: exit %d", rc);
    rc = prepare("nope.txt", "tn");
    CHECK(rc == 2 && file_contains(log, "error: cannot open nope.txt: No such file or directory"), "missing input: exit %d", rc);
    write_text(tmp_path("empty.txt"), "");
    rc = prepare("empty.txt", "te");
    CHECK(rc == 2 && file_contains(log, "warning: empty.txt: no documents") && file_contains(log, "error: no documents in the input"),
          "empty input: exit %d", rc);
    rc = prepare("t.dat", "tx");
    CHECK(rc == 2 && file_contains(log, "cannot tell the format of t.dat"), "unknown extension: exit %d", rc);
    write_text(tmp_path("afile"), "x");
    rc = prepare("t.txt", "afile/out");
    CHECK(rc == 2 && file_contains(log, "error: cannot create output directory afile/out: Not a directory"),
          "unwritable output directory: exit %d", rc);
    rc = prepare("--val-fraction 1.5 t.txt", "tv");
    CHECK(rc == 2 && file_contains(log, "--val-fraction: must be between 0 and 1, got 1.5"), "bad --val-fraction: exit %d", rc);
    // no stray temporary files anywhere after all of the above
    rc = test_system("cd '%s' && ! find . -name '*.tmp.*' | grep -q .", tmp_dir);
    CHECK(rc == 0, "no temporary files left behind");
}

static void test_prepare_builtin(void) {
    char all[1 << 16];
    int rc = prepare("--builtin 20000 --val-fraction 0.1 --shard-mb 0.004", "b");
    CHECK(rc == 0, "prepare --builtin 20000: exit %d", rc);
    int ok;
    int64_t n = read_split(tmp_path("b"), "train", all, sizeof all, &ok);
    int labels_ok = ok && n > 50;
    for (char *p = all; *p && labels_ok; p = strchr(p, ';') + 1) labels_ok = p[0] >= '1' && p[0] <= '5' && p[1] == ':';
    CHECK(labels_ok, "built-in corpus: %lld labelled train documents (stars 1-5), offsets match the stream", (long long)n);
    CHECK(file_exists(tmp_path("b/train_004.bin")), "--shard-mb 0.004 splits train into several shards");
    // every shard starts at a document: shard sizes add up to document boundaries
    Shard sh;
    shard_open(&sh, tmp_path("b/train_001.bin"), 1);
    CHECK(sh.size > 0 && sh.size <= 4194 + 1000 && sh.data[0] == '\n' && sh.data[sh.size - 1] == ' ' && (sh.flags & SHARD_FRAMED),
          "shard 1 holds whole documents (%lld bytes)", (long long)sh.size);
    shard_close(&sh);
    rc = prepare("--builtin 20000 --val-fraction 0.1", "b");
    CHECK(rc == 0 && file_exists(tmp_path("b/train_000.bin")) && !file_exists(tmp_path("b/train_001.bin")),
          "a rerun with one shard removes the stale train_001.bin");
}

// standard input, a BOM, flags, parents of -o, and the switch-over of the whole set
static void test_prepare_stdin_and_output(void) {
    char all[8192], log[4200];
    snprintf(log, sizeof log, "%s", tmp_path("log.txt"));  // tmp_path's buffers rotate
    size_t n1, n2;
    // the same JSON lines through standard input (plain, then gzip) give the same shard as the file
    int rc = prepare("--val-fraction 0.4 --seed 5 r.jsonl", "sf");
    rc |= test_system("cd '%s' && cat r.jsonl | '%s/prepare' --val-fraction 0.4 --seed 5 -o sin - > log.txt 2>&1", tmp_dir, tool_dir);
    char *a = read_all(tmp_path("sf/train_000.bin"), &n1), *b = read_all(tmp_path("sin/train_000.bin"), &n2);
    CHECK(rc == 0 && a && b && n1 == n2 && !memcmp(a, b, n1), "cat r.jsonl | prepare -o d -: the shard of prepare r.jsonl (exit %d)", rc);
    free(b);
    if (test_system("command -v gzip >/dev/null") == 0) {
        rc = test_system("cd '%s' && gzip -c r.jsonl | '%s/prepare' --val-fraction 0.4 --seed 5 -o sgz - > log.txt 2>&1", tmp_dir, tool_dir);
        b = read_all(tmp_path("sgz/train_000.bin"), &n2);
        CHECK(rc == 0 && a && b && n1 == n2 && !memcmp(a, b, n1), "gzip -c r.jsonl | prepare -o d -: the same shard (exit %d)", rc);
        free(b);
    }
    free(a);
    rc = test_system("cd '%s' && printf 'one\\ntwo\\n' | '%s/prepare' --format text --val-fraction 0 -o stx - > log.txt 2>&1", tmp_dir, tool_dir);
    int ok;
    int64_t n = read_split(tmp_path("stx"), "train", all, sizeof all, &ok);
    CHECK(rc == 0 && ok && n == 2 && has_each_once(all, "-:one;-:two;"), "printf 'one\\ntwo\\n' | prepare --format text -: %s", all);
    rc = test_system("cd '%s' && printf 'one\\n' | '%s/prepare' -o sx - > log.txt 2>&1", tmp_dir, tool_dir);
    CHECK(rc == 2 && file_contains(log, "error: <stdin>: cannot tell the format"), "text on standard input without --format: exit %d", rc);
    // a UTF-8 byte order mark before a CSV header: the label column is still found
    write_text(tmp_path("bom.csv"), "\xEF\xBB\xBFlabel,sentence\n1,good\n0,bad\n");
    rc = prepare("--val-fraction 0 bom.csv", "bom");
    n = read_split(tmp_path("bom"), "train", all, sizeof all, &ok);
    CHECK(rc == 0 && ok && n == 2 && has_each_once(all, "1:good;0:bad;"), "CSV with a UTF-8 BOM keeps its labels: %s", all);
    // flags: a shard size that does not convert to an integer; trailing junk
    rc = prepare("--shard-mb inf t.txt", "fi");
    CHECK(rc == 2 && file_contains(log, "--shard-mb: expected a number, got \"inf\""), "--shard-mb inf: exit %d", rc);
    rc = prepare("--shard-mb 1e300 t.txt", "fi");
    CHECK(rc == 2 && file_contains(log, "--shard-mb: must be between 1e-06 and 1.07374e+09, got 1e300"), "--shard-mb 1e300: exit %d", rc);
    rc = prepare("--builtin 99999999999999", "fi");
    CHECK(rc == 2 && file_contains(log, "--builtin 99999999999999: at most"), "--builtin 10^14 (it would fill memory first): exit %d", rc);
    rc = prepare("--seed 5x t.txt", "fi");
    CHECK(rc == 2 && file_contains(log, "--seed: expected a whole number, got \"5x\""), "--seed 5x: exit %d", rc);
    // -o with missing parents (data/amazon on a fresh clone)
    rc = prepare("--val-fraction 0 t.txt", "new/parent/dirs");
    CHECK(rc == 0 && file_exists(tmp_path("new/parent/dirs/train_000.bin")), "-o new/parent/dirs creates the parents: exit %d", rc);

    // A run that fails part way (a file size limit stands in for a full disk: the one
    // long document's shard cannot be written) leaves the previous set exactly as it
    // was, and no temporary files; before, the shards written first had replaced theirs.
    char line[160];
    FILE *f = fopen(tmp_path("old.txt"), "w");
    for (int i = 0; i < 400; i++) fprintf(f, "an old document, number %d, of about forty bytes\n", i);
    fclose(f);
    rc = prepare("--shard-mb 0.004 old.txt", "sw");
    CHECK(rc == 0 && file_exists(tmp_path("sw/train_004.bin")), "the old set: several shards (exit %d)", rc);
    test_system("cd '%s' && cp -r sw sw_before", tmp_dir);
    f = fopen(tmp_path("new.txt"), "w");
    for (int i = 0; i < 400; i++) fprintf(f, "a new document, number %d, of about forty bytes\n", i);
    for (int i = 0; i < 2000; i++) { snprintf(line, sizeof line, "long document word %d ", i); fputs(line, f); }
    fputs("\n", f);
    fclose(f);
    rc = test_system("cd '%s' && trap '' XFSZ && ulimit -f 40 && '%s/prepare' --shard-mb 0.004 -o sw new.txt > log.txt 2>&1", tmp_dir, tool_dir);
    CHECK(rc == 2 && file_contains(log, "error: cannot write") && file_contains(log, "File too large"),
          "a write that fails part way: exit %d, the message says so", rc);
    CHECK(test_system("cd '%s' && diff -r sw sw_before >/dev/null", tmp_dir) == 0, "the old set is left exactly as it was, every file");
    rc = test_system("cd '%s' && ! find . -name '*.tmp.*' | grep -q .", tmp_dir);
    CHECK(rc == 0, "no temporary files or staging directory left behind");
    // and the same run without the limit replaces the whole set, and removes the
    // temporary directory a prepare killed with -9 left beside sw (its process is gone),
    // and only that: one of a live process, and one of another name, stay
    test_system("cd '%s' && p=$(sh -c 'echo $$') && mkdir sw.prepare.tmp.$p && touch sw.prepare.tmp.$p/train_000.bin "
                "sw.prepare.tmp.$p/val_labels.tsv.tmp.12 && mkdir sw.prepare.tmp.1 sw.prepare.tmp.7x", tmp_dir);
    rc = prepare("--shard-mb 0.004 new.txt", "sw");
    CHECK(test_system("cd '%s' && [ \"$(ls -d sw.prepare.tmp.* | tr '\\n' ' ')\" = "
                      "'sw.prepare.tmp.1 sw.prepare.tmp.7x ' ]", tmp_dir) == 0,
          "a dead prepare's temporary directory is removed; a live process's and another name's are not");
    test_system("cd '%s' && rmdir sw.prepare.tmp.1 sw.prepare.tmp.7x", tmp_dir);
    CHECK(rc == 0 && test_system("cd '%s' && ! diff -r sw sw_before >/dev/null && grep -q 'long document' sw/train_*.bin", tmp_dir) == 0,
          "without the limit the new set replaces the old (exit %d)", rc);
    // SIGTERM or SIGHUP while the shards are being written: stops, removes what it wrote, exit 2
    const int sigs[2] = {15, 1};
    for (int k = 0; k < 2; k++) {
        rc = test_system("cd '%s' && { '%s/prepare' --builtin 60000000 --shard-mb 1 -o sig > sig.log 2>&1 & p=$!; "
                         "for i in $(seq 1 4000); do ls -a | grep -q sig.prepare.tmp && break; sleep 0.005; done; "
                         "kill -%d $p; wait $p; }", tmp_dir, tool_dir, sigs[k]);
        char said[64];
        snprintf(said, sizeof said, "interrupted (signal %d)", sigs[k]);
        CHECK(rc == 2 && file_contains(tmp_path("sig.log"), said) && !file_exists(tmp_path("sig/train_000.bin")) &&
              test_system("cd '%s' && ! ls -a | grep -q sig.prepare.tmp", tmp_dir) == 0,
              "signal %d while writing: exit %d (want 2), says so, no shard and no temporary directory left", sigs[k],
              rc);
    }
}

// The set in DIR is whole: a prepare killed at any rename, unlink or rmdir it makes
// (strace's fault injection kills it at the N-th) leaves DIR exactly the old set or
// exactly the new one; the next prepare removes what the killed one left. Before, the
// shards were renamed into DIR one at a time, and a kill between two left a mix the
// trainer accepted.
#define NO_LSAN "ASAN_OPTIONS=detect_leaks=0 "  // LeakSanitizer refuses to run under ptrace (SAN=1 builds)
static void test_prepare_kill_anywhere(void) {
    if (test_system("strace -f -o /dev/null -e inject=getpid:error=ENOSYS:when=1000 true 2>/dev/null") != 0) {
        if (getenv("REQUIRE_STRACE")) CHECK(0, "strace with fault injection not usable, but REQUIRE_STRACE is set");
        else SKIP("strace with fault injection not usable here: a prepare killed mid-switch is not tried");
        return;
    }
    int rc = prepare("--builtin 30000 --shard-mb 0.004 --seed 1", "ka");
    rc |= prepare("--builtin 45000 --shard-mb 0.004 --seed 2", "kb");
    CHECK(rc == 0 && file_exists(tmp_path("ka/train_005.bin")) && file_exists(tmp_path("kb/train_008.bin")),
          "two sets to switch between, of 7 and 10 train shards (exit %d)", rc);
    // strace counts each system call apart: when=N is the N-th call of that one
    const char *calls[4] = {"rename,renameat", "renameat2", "unlink,unlinkat", "rmdir"};
    for (int c = 0; c < 4; c++) {
        int n, whole = 0, cleaned = 0, completed = 0;
        for (n = 1; n <= 80 && !completed; n++) {
            test_system("cd '%s' && rm -rf kd && cp -r ka kd", tmp_dir);
            rc = test_system("cd '%s' && " NO_LSAN "strace -f -o /dev/null -e trace=%s "
                             "-e inject=%s:signal=KILL:when=%d '%s/prepare' --builtin 45000 --shard-mb 0.004 --seed 2 "
                             "-o kd > log.txt 2>&1", tmp_dir, calls[c], calls[c], n, tool_dir);
            completed = rc == 0;
            int is_a = test_system("cd '%s' && diff -r kd ka > /dev/null 2>&1", tmp_dir) == 0;
            int is_b = test_system("cd '%s' && diff -r kd kb > /dev/null 2>&1", tmp_dir) == 0;
            whole += is_a || is_b;
            if (!is_a && !is_b)
                CHECK(0, "killed at its %d-th %s (exit %d): kd is neither the old set nor the new", n, calls[c], rc);
            rc = prepare("--format text nothing.txt", "kd");  // fails reading; first removes what the killed one left
            cleaned += rc == 2 && test_system("cd '%s' && ! ls -a | grep -q '^kd\\.prepare\\.'", tmp_dir) == 0;
        }
        CHECK(completed && whole == n - 1 && cleaned == n - 1,
              "killed at each of its %d calls of %s, and let finish: kd whole after %d of %d runs, and the next "
              "prepare removed what each left (%d)", n - 2, calls[c], whole, n - 1, cleaned);
    }
    // where the file system has no RENAME_EXCHANGE: kd is renamed aside, the new set in; a
    // kill between the two leaves no kd, and the next prepare renames the old set back
    test_system("cd '%s' && rm -rf kd && cp -r ka kd", tmp_dir);
    rc = test_system("cd '%s' && " NO_LSAN "strace -f -o /dev/null -e inject=renameat2:error=EINVAL "
                     "'%s/prepare' --builtin 45000 --shard-mb 0.004 --seed 2 -o kd > log.txt 2>&1", tmp_dir, tool_dir);
    CHECK(rc == 0 && test_system("cd '%s' && diff -r kd kb > /dev/null", tmp_dir) == 0,
          "without RENAME_EXCHANGE (EINVAL): the new set switched in by two renames (exit %d)", rc);
    int restored = 0, n;
    for (n = 1; n <= 40 && !restored; n++) {  // the kill that lands between the two renames
        test_system("cd '%s' && rm -rf kd kd.prepare.* && cp -r ka kd", tmp_dir);
        test_system("cd '%s' && " NO_LSAN "strace -f -o /dev/null -e inject=renameat2:error=EINVAL "
                    "-e inject=rename,renameat:signal=KILL:when=%d "
                    "'%s/prepare' --builtin 45000 --shard-mb 0.004 --seed 2 -o kd > log.txt 2>&1", tmp_dir, n,
                    tool_dir);
        if (file_exists(tmp_path("kd"))) continue;
        rc = prepare("--format text nothing.txt", "kd");
        restored = 1;
        CHECK(rc == 2 && file_contains(tmp_path("log.txt"), "the set a killed prepare had moved aside is back") &&
              test_system("cd '%s' && diff -r kd ka > /dev/null && ! ls -a | grep -q '^kd\\.prepare\\.'", tmp_dir) == 0,
              "killed between the two renames (no kd): the next prepare puts the old set back, whole (exit %d)", rc);
    }
    CHECK(restored, "a kill between the two renames was found (at the %d-th rename)", n - 1);
}

// DIR is the set and nothing else, and its name is followed: what the switch would
// take away is refused before anything is read; a DIR that is a symbolic link stays
// one; DIR keeps its permissions.
static void test_prepare_out_dir(void) {
    char log[4200];
    snprintf(log, sizeof log, "%s", tmp_path("log.txt"));  // tmp_path's buffers rotate
    int rc = prepare("--builtin 20000", "od");
    test_system("cd '%s' && printf 'one\\ntwo\\n' > od.txt && cp od/train_labels.tsv od_labels.keep", tmp_dir);
    test_system("cd '%s' && ln -sf od/train_000.bin sym.txt && ln -f od/train_labels.tsv hard.txt", tmp_dir);
    const char *refused[][3] = {
        {"--format text sym.txt", "input sym.txt is one of the files -o od is about to replace (train_000.bin)",
         "an input that is a symbolic link to a shard"},
        {"--format text hard.txt", "input hard.txt is one of the files -o od is about to replace (train_labels.tsv)",
         "an input that is a hard link to a labels file"},
        {"--format text od/train_labels.tsv", "input od/train_labels.tsv is one of the files -o od", "an input in DIR"},
        {"--format text - < od/val_labels.tsv", "input <stdin> is one of the files -o od is about to replace",
         "standard input redirected from one of DIR's files"}};
    for (int k = 0; k < 4; k++) {
        rc = prepare(refused[k][0], "od");
        CHECK(rc == 2 && file_contains(log, refused[k][1]) && test_system("cd '%s' && cmp -s od/train_labels.tsv "
              "od_labels.keep", tmp_dir) == 0, "%s: exit %d, refused, the set kept", refused[k][2], rc);
    }
    test_system("cd '%s' && mkdir -p od2/sub && cp od.txt od2/sub/in.txt && echo mine > od/notes.txt", tmp_dir);
    rc = prepare("od.txt", "od");
    CHECK(rc == 2 && file_contains(log, "-o od holds notes.txt, which is not a file build/prepare writes") &&
          file_contains(tmp_path("od/notes.txt"), "mine"), "a file of the user's in DIR: refused, kept (exit %d)", rc);
    rc = prepare("od2/sub/in.txt", "od2");
    CHECK(rc == 2 && file_contains(log, "input od2/sub/in.txt lies inside -o od2"), "an input inside DIR: exit %d", rc);
    test_system("cd '%s' && rm od/notes.txt && mkdir -p real && mv od real/od && ln -s real/od od && chmod 750 real/od",
                tmp_dir);
    rc = prepare("--val-fraction 0 od.txt", "od");
    int ok;
    char all[256];
    int64_t docs = read_split(tmp_path("od"), "train", all, sizeof all, &ok);
    struct stat ls, ds;
    int link = lstat(tmp_path("od"), &ls) == 0 && S_ISLNK(ls.st_mode), there = stat(tmp_path("real/od"), &ds) == 0;
    CHECK(rc == 0 && ok && docs == 2 && link && there && (ds.st_mode & 0777) == 0750 &&
              !file_exists(tmp_path("od/val_000.bin")),
          "-o od, a symbolic link to real/od (mode 750): exit %d, the link kept, real/od holds the new set "
          "(%lld documents), mode %o", rc, (long long)docs, (unsigned)(ds.st_mode & 0777));
    rc = test_system("cd '%s' && ! ls -a . real | grep -q prepare", tmp_dir);
    CHECK(rc == 0, "no temporary directory left beside od or real/od");
    // a link to a directory not made yet: made where the link leads, the link kept (the
    // switch swapped the link itself for the directory)
    test_system("cd '%s' && ln -s real/later later", tmp_dir);
    rc = prepare("--val-fraction 0 od.txt", "later");
    CHECK(rc == 0 && lstat(tmp_path("later"), &ls) == 0 && S_ISLNK(ls.st_mode) &&
              file_exists(tmp_path("real/later/train_000.bin")) && test_system("cd '%s' && ! ls -a | grep -q "
              "'^later\\.'", tmp_dir) == 0,
          "-o later, a link to real/later not made yet: exit %d, real/later made and written, the link kept", rc);
    // DIR keeps its owner and group where prepare may give them (run as root for another user)
    if (geteuid() == 0) {
        test_system("cd '%s' && mkdir -p own && chown 65534:65534 own", tmp_dir);
        rc = prepare("--val-fraction 0 od.txt", "own");
        struct stat os;
        memset(&os, 0, sizeof os);
        CHECK(rc == 0 && stat(tmp_path("own"), &os) == 0 && os.st_uid == 65534 && os.st_gid == 65534,
              "-o a directory of another user's, prepared by root: it stays theirs (exit %d, owner %u:%u)", rc,
              (unsigned)os.st_uid, (unsigned)os.st_gid);
    } else SKIP("-o a directory of another user's: not root");
    // -o a mount point (a container's data volume): it cannot be renamed, so refused before any work
    // (mounting needs root: skipped without it)
    if (test_system("cd '%s' && mkdir -p mnt && mount -t tmpfs -o size=1m tmpfs mnt 2> /dev/null", tmp_dir) == 0) {
        rc = prepare("--val-fraction 0 od.txt", "mnt");
        CHECK(rc == 2 && file_contains(log, "-o mnt is a mount point") && test_system("cd '%s' && ! ls -a | grep -q "
              "'^mnt\\.'", tmp_dir) == 0, "-o a mount point: refused before any work, nothing left (exit %d)", rc);
        test_system("cd '%s' && umount mnt", tmp_dir);
    } else SKIP("-o a mount point: cannot mount a tmpfs here (not root)");
    // -o holding the current directory: the switch would leave the shell in the removed old one
    rc = test_system("cd '%s/od' && '%s/prepare' --val-fraction 0 -o . ../od.txt > '%s' 2>&1", tmp_dir, tool_dir, log);
    CHECK(rc == 2 && file_contains(log, "-o . holds the current directory") &&
              file_exists(tmp_path("od/train_000.bin")),
          "-o . (the current directory): refused, the set kept (exit %d)", rc);
}

// The compressed formats zlib does not read are refused by their magic bytes, whatever
// the name, and a file named .gz must be gzip (bzip2 data named .gz was read as text).
static void test_prepare_formats(void) {
    char log[4200];
    snprintf(log, sizeof log, "%s", tmp_path("log.txt"));  // tmp_path's buffers rotate
    write_text(tmp_path("plain.txt"), "just text\n");
    static const struct { const char *bytes; size_t n; const char *name; } formats[] = {
        {"BZh91AY&SY\x01\x02garbage\n", 20, "bzip2"}, {"\xFD" "7zXZ\0\0\x04garbage\n", 15, "xz"},
        {"\x28\xB5\x2F\xFD\x04\x58garbage\n", 14, "zstd"}, {"PK\x03\x04\x14\0garbage\n", 14, "zip"}};
    for (int k = 0; k < 4; k++) {
        const char *names[3] = {"c.txt.gz", "c.jsonl", "-"};
        for (int j = 0; j < 3; j++) {
            test_write_file(tmp_path(j == 2 ? "c.bin" : names[j]), formats[k].bytes, formats[k].n);
            char args[200], want[200];
            snprintf(args, sizeof args, j == 2 ? "--format text - < c.bin" : "%s", names[j]);
            if (j == 0)
                snprintf(want, sizeof want, "error: c.txt.gz: named .gz but not gzip data: %s data", formats[k].name);
            else
                snprintf(want, sizeof want, "error: %s: %s data, which prepare does not read",
                         j == 2 ? "<stdin>" : names[j], formats[k].name);
            int rc = prepare(args, "cf");
            CHECK(rc == 2 && file_contains(log, want) && !file_exists(tmp_path("cf")), "%s data as %s: exit %d, \"%s\"",
                  formats[k].name, names[j], rc, want);
        }
    }
    test_system("cd '%s' && cp plain.txt plain.txt.gz && : > empty.txt.gz && "
                "bzip2 -c plain.txt | gzip -c > twice.txt.gz", tmp_dir);
    int rc = prepare("plain.txt.gz", "cf");
    CHECK(rc == 2 && file_contains(log, "error: plain.txt.gz: named .gz but not gzip data: it does not start with the "
                                   "gzip bytes 1f 8b"), "text named .gz: exit %d", rc);
    rc = prepare("empty.txt.gz", "cf");
    CHECK(rc == 2 && file_contains(log, "error: empty.txt.gz: named .gz but not gzip data: it is empty"),
          "an empty .gz: exit %d", rc);
    if (test_system("command -v bzip2 > /dev/null") == 0) {
        rc = prepare("twice.txt.gz", "cf");
        CHECK(rc == 2 && file_contains(log, "error: twice.txt.gz: bzip2 data inside gzip, which prepare does not read"),
              "bzip2 inside gzip: exit %d", rc);
    }
    rc = prepare("--val-fraction 0 plain.txt", "cf");
    CHECK(rc == 0 && file_exists(tmp_path("cf/train_000.bin")), "plain text still reads (exit %d)", rc);
}

// What prepare reads is bounded and named. A line (a CSV record) longer than
// MAX_LINE_BYTES is refused, naming its file and line, in every format and through
// standard input and gzip (a file without newlines, /dev/zero, grew the buffer to 2 GB and
// ended in zlib's "request does not fit in an int"); running out of memory is one line,
// exit 2. gzip is read by prepare itself: what follows the gzip data must be more gzip
// (trailing garbage passed without a word), and errors name the file (not zlib's "<fd:3>").
// "--" ends the options. A FIFO is read as it is written, and a wait for its writer is said.
static void test_prepare_limits(void) {
    char log[4200];
    snprintf(log, sizeof log, "%s", tmp_path("log.txt"));  // tmp_path's buffers rotate
    int rc = test_system("cd '%s' && timeout 60 '%s/prepare' --format text -o lz /dev/zero > log.txt 2>&1", tmp_dir,
                         tool_dir);
    CHECK(rc == 2 && file_contains(log, "error: /dev/zero:1: a line longer than 64 MiB") && !file_exists(tmp_path("lz")),
          "prepare --format text /dev/zero: exit %d, names /dev/zero:1 and the limit", rc);
    rc = test_system("cd '%s' && { echo first; head -c 70000000 /dev/zero | tr '\\0' a; echo; } | gzip -1 | "
                     "'%s/prepare' --format text -o lz - > log.txt 2>&1", tmp_dir, tool_dir);
    CHECK(rc == 2 && file_contains(log, "error: <stdin>:2: a line longer than 64 MiB"),
          "a 70 MB second line, gzip on standard input: exit %d, names <stdin>:2", rc);
    rc = test_system("cd '%s' && { printf '{\"reviewText\": \"'; head -c 70000000 /dev/zero | tr '\\0' a; "
                     "printf '\"}\\n'; } > long.jsonl && '%s/prepare' -o lz long.jsonl > log.txt 2>&1; r=$?; "
                     "rm -f long.jsonl; exit $r", tmp_dir, tool_dir);
    CHECK(rc == 2 && file_contains(log, "error: long.jsonl:1: a line longer than 64 MiB"),
          "a 70 MB JSON line: exit %d, names long.jsonl:1", rc);
    rc = test_system("cd '%s' && { echo label,text; echo 1,fine; printf '0,\"open'; yes 'a quoted line' | "
                     "head -c 70000000; } > long.csv && '%s/prepare' -o lz long.csv > log.txt 2>&1; r=$?; rm -f long.csv; "
                     "exit $r", tmp_dir, tool_dir);
    CHECK(rc == 2 && file_contains(log, "error: long.csv:3: a CSV record longer than 64 MiB"),
          "a CSV quote never closed over 70 MB of lines: exit %d, names long.csv:3", rc);
#ifndef SANITIZED  // AddressSanitizer's shadow memory does not fit under ulimit -v
    rc = test_system("cd '%s' && (ulimit -v 400000 && '%s/prepare' --builtin 1000000000 -o lz) > log.txt 2>&1", tmp_dir,
                     tool_dir);
    CHECK(rc == 2 && file_contains(log, "error: out of memory: ") && file_contains(log, "split the input") &&
          test_system("[ $(wc -l < '%s') = 1 ]", log) == 0,
          "out of memory holding the documents (ulimit -v 400000): exit %d, one line", rc);
#endif
    // gzip: more members are read on; anything else after the gzip data, a cut and a corruption are refused by name
    test_write_file(tmp_path("one.txt"), "one\n", 4);
    test_system("cd '%s' && gzip -c < one.txt > one.txt.gz && { cat one.txt.gz; echo two | gzip -c; } > two.txt.gz && "
                "{ cat one.txt.gz; printf 'junk'; } > junk.txt.gz && { cat one.txt.gz; head -c 64 /dev/zero; } > "
                "zeros.txt.gz && head -c 15 two.txt.gz > cut.txt.gz && cp one.txt.gz bad.txt.gz && "
                "printf '\\377' | dd of=bad.txt.gz bs=1 seek=$(($(wc -c < one.txt.gz) - 8)) conv=notrunc 2>/dev/null",
                tmp_dir);  // bad.txt.gz: its CRC-32 changed
    char all[4096];
    int ok;
    rc = prepare("--val-fraction 0 two.txt.gz", "gz");
    int64_t n = read_split(tmp_path("gz"), "train", all, sizeof all, &ok);
    CHECK(rc == 0 && ok && n == 2 && has_each_once(all, "-:one;-:two;"), "two gzip members back to back: both read (%s)",
          all);
    static const char *const gz_bad[][2] = {
        {"junk.txt.gz", "error: junk.txt.gz: bytes that are not gzip data follow its gzip data (at byte "},
        {"zeros.txt.gz", "error: zeros.txt.gz: bytes that are not gzip data follow its gzip data (at byte "},
        {"--format text - < junk.txt.gz", "error: <stdin>: bytes that are not gzip data follow its gzip data"},
        {"cut.txt.gz", "error: cut.txt.gz: the gzip data ends early, in line 1 of its text (a truncated file?)"},
        {"bad.txt.gz", "error: bad.txt.gz: corrupt gzip data at byte 20 of the file, in line 1 of its text: incorrect data check"}};
    for (int k = 0; k < 5; k++) {
        rc = prepare(gz_bad[k][0], "gzb");
        CHECK(rc == 2 && file_contains(log, gz_bad[k][1]) && !file_contains(log, "<fd:") && !file_exists(tmp_path("gzb")),
              "prepare %s: exit %d, \"%s\"", gz_bad[k][0], rc, gz_bad[k][1]);
    }
    // "--": what follows is inputs, a name that starts with a dash too
    test_write_file(tmp_path("-dash.txt"), "dashed\n", 7);
    rc = test_system("cd '%s' && '%s/prepare' --val-fraction 0 -o dd -- -dash.txt > log.txt 2>&1", tmp_dir, tool_dir);
    n = read_split(tmp_path("dd"), "train", all, sizeof all, &ok);
    CHECK(rc == 0 && ok && n == 1 && has_each_once(all, "-:dashed;"), "prepare -o d -- -dash.txt reads -dash.txt (exit %d)",
          rc);
    // a FIFO: read as it is written; while no writer has opened it, prepare says what it waits for
    rc = test_system("cd '%s' && rm -f fifo.txt && mkfifo fifo.txt && { '%s/prepare' --val-fraction 0 -o ff fifo.txt "
                     "> log.txt 2>&1 & p=$!; sleep 1.5; echo streamed > fifo.txt; wait $p; }", tmp_dir, tool_dir);
    n = read_split(tmp_path("ff"), "train", all, sizeof all, &ok);
    CHECK(rc == 0 && ok && n == 1 && has_each_once(all, "-:streamed;") &&
          file_contains(log, "prepare: fifo.txt is a FIFO: waiting for a writer to open it"),
          "a FIFO: prepare says it waits for a writer, then reads what is written (exit %d)", rc);
    test_system("cd '%s' && rm -f fifo.txt", tmp_dir);
    // a NUL byte is text (build/transfer keeps it too), but a label holding one is no label
    test_write_file(tmp_path("nul.csv"), "label,text\n1,a\0b\n1\0x,c\n", 23);
    rc = prepare("--val-fraction 0 nul.csv", "nul");
    size_t nb;
    char *shard = read_all(tmp_path("nul/train_000.bin"), &nb);
    CHECK(rc == 0 && shard && nb >= 6 && !memcmp(shard + nb - 6, "\n a\0b ", 6) &&
          file_contains(log, "warning: nul.csv:3: malformed CSV: the label holds a NUL byte (skipped)"),
          "a NUL byte in a CSV text is kept, one in a label skips the line (exit %d)", rc);
    free(shard);
}

// Labels are kept whole (a JSON label of 300 bytes was cut to 255, a real to 6 digits),
// and a document with an integer beyond 64 bits in some field is kept (jansson refused
// the whole line, "too big integer").
static void test_prepare_labels(void) {
    char long_label[301], text[1200];
    memset(long_label, 'L', 300);
    long_label[300] = 0;
    snprintf(text, sizeof text, "{\"reviewText\": \"long label\", \"overall\": \"%s\"}\n"
                                "{\"reviewText\": \"real label\", \"overall\": 0.123456789}\n"
                                "{\"reviewText\": \"five\", \"overall\": 5.0}\n"
                                "{\"reviewText\": \"big id\", \"overall\": 4, \"id\": 99999999999999999999999}\n"
                                "{\"reviewText\": \"big label\", \"overall\": 99999999999999999999, \"x\": 1}\n",
             long_label);
    write_text(tmp_path("lab.jsonl"), text);
    int rc = prepare("--val-fraction 0 lab.jsonl", "lab");
    char *tsv = read_all(tmp_path("lab/train_labels.tsv"), NULL);
    char want[400];
    snprintf(want, sizeof want, "\t%s\n", long_label);
    CHECK(rc == 0 && tsv && strstr(tsv, want), "a JSON label of 300 bytes is kept whole (exit %d)", rc);
    CHECK(tsv && strstr(tsv, "\t0.123456789\n") && strstr(tsv, "\t5\n"), "a real label is written as the shortest text "
          "that reads back as it: 0.123456789, and 5.0 as 5");
    CHECK(tsv && strstr(tsv, "\t4\n"), "a document with an integer beyond 64 bits in another field is kept, label 4");
    CHECK(file_contains(tmp_path("log.txt"),
                        "lab.jsonl:5: malformed JSON: label \"overall\" is an integer beyond 2^53"),
          "a label beyond 64 bits (so decoded as a real, not exact) is reported with its line, not changed");
    free(tsv);
    snprintf(text, sizeof text, "label,sentence\n%s,long label\n", long_label);
    write_text(tmp_path("lab.csv"), text);
    rc = prepare("--val-fraction 0 lab.csv", "labc");
    CHECK(rc == 0 && file_contains(tmp_path("labc/train_labels.tsv"), want),
          "a CSV label of 300 bytes is kept whole (exit %d)", rc);
}

// A directory switched for another while its shards are being opened (prepare's
// exchange, done here when the stream reaches train_001.bin, through this program's own
// open and openat): the stream is the new set whole, never the old set's first shard
// followed by the new set's others.
static const char *switch_dir;
static int switch_armed;
static void switch_now(const char *path) {
    size_t n = strlen(path), k = strlen("train_001.bin");
    if (!switch_armed || n < k || strcmp(path + n - k, "train_001.bin")) return;
    switch_armed = 0;
    char old[4200], fresh[4200], f[4300];
    snprintf(old, sizeof old, "%s.old", switch_dir);
    snprintf(fresh, sizeof fresh, "%s.new", switch_dir);
    if (rename(switch_dir, old) != 0 || rename(fresh, switch_dir) != 0) { perror("switch"); exit(1); }
    for (int i = 0; i < 3; i++) {  // then the old set goes, as prepare removes it
        snprintf(f, sizeof f, "%s/train_%03d.bin", old, i);
        unlink(f);
    }
    rmdir(old);
}
static int open_switching(int dfd, const char *path, int flags, va_list ap) {
    mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;
    switch_now(path);
    return (int)syscall(SYS_openat, dfd, path, flags, mode);
}
int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int fd = open_switching(AT_FDCWD, path, flags, ap);
    va_end(ap);
    return fd;
}
int openat(int dfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int fd = open_switching(dfd, path, flags, ap);
    va_end(ap);
    return fd;
}
static void test_stream_switched(void) {
    const char *d = tmp_path("sd");
    char dir[4200], fresh[4300], p[4400];
    snprintf(dir, sizeof dir, "%s", d);
    snprintf(fresh, sizeof fresh, "%s.new", dir);
    mkdir(dir, 0777);
    mkdir(fresh, 0777);
    const char *old_parts[3] = {"AAAA", "BBBB", "CCCC"}, *new_parts[2] = {"xxxxx", "yyyyy"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/train_%03d.bin", dir, i);
        shard_write(p, old_parts[i], 4, 0);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/train_%03d.bin", fresh, i);
        shard_write(p, new_parts[i], 5, 0);
    }
    switch_dir = dir;
    switch_armed = 1;
    Stream s;
    stream_open_dir(&s, dir, "train", 1);
    char got[16] = {0};
    if (s.size > 0 && s.size < 16) stream_read(&s, 0, s.size, (uint8_t *)got);
    CHECK(!switch_armed && s.n_shards == 2 && s.size == 10 && !strcmp(got, "xxxxxyyyyy"),
          "a directory switched while its shards open: the stream is the new set whole (%d shards, \"%s\")",
          s.n_shards, got);
    stream_free(&s);
}

// The shards a user names: a directory, or files separated by commas; none is an error
// that names the setting (the trainers' --train said "no shard files given" alone)
static void open_spec_child(void *spec) {
    Stream s;
    stream_open_spec(&s, "--train", (const char *)spec, "train", 1);
}
static void test_stream_spec(void) {
    EXPECT_EXIT(open_spec_child, "", 2, "--train \"\": no shard files given", "--train \"\"");
    EXPECT_EXIT(open_spec_child, ",,", 2, "--train \",,\": no shard files given", "--train \",,\"");
    char spec[8500];
    snprintf(spec, sizeof spec, "%s/sd/train_000.bin,%s/sd/train_001.bin", tmp_dir, tmp_dir);
    Stream s;
    stream_open_spec(&s, "--train", spec, "train", 1);
    CHECK(s.n_shards == 2 && s.size == 10, "--train A,B: two shards, %lld bytes", (long long)s.size);
    stream_free(&s);
    snprintf(spec, sizeof spec, "%s/sd", tmp_dir);
    stream_open_spec(&s, "--train", spec, "train", 1);
    CHECK(s.n_shards == 2 && s.size == 10, "--train DIR: its train shards (%d)", s.n_shards);
    stream_free(&s);
}

int main(void) {
    snprintf(tool_dir, sizeof tool_dir, "%s", test_bin_dir());
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/mlstm_test_data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }

    test_shard_roundtrip();
    test_shard_errors();
    test_shard_atomic();
    test_stream_read();
    test_loader_coverage();
    test_loader_resets();
    test_stream_over_4gb();
    test_stream_switched();
    test_stream_spec();
    test_corpus();
    char prep[4200];
    snprintf(prep, sizeof prep, "%s/prepare", tool_dir);
    if (access(prep, X_OK) == 0) {
        test_prepare_jsonl();
        test_prepare_csv();
        test_prepare_text_and_errors();
        test_prepare_builtin();
        test_prepare_stdin_and_output();
        test_prepare_out_dir();
        test_prepare_formats();
        test_prepare_labels();
        test_prepare_limits();
        test_prepare_kill_anywhere();
    } else {
        CHECK(0, "build/prepare not found next to this test (%s): run make", prep);
    }
    test_system("rm -rf '%s'", tmp_dir);
    return test_summary("test_data");
}
