/* Sequence-length sources: the lognormal and log-uniform generators and the length-file
   parser (plain, commented, CSV), with every malformed input it must reject. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

static void lognormal_follows_megatron_convention(void)
{
    enum { N = 200000 };
    static int64_t lengths[N];
    dcp_lognormal d = {4096.0, 0.5, 1, DCP_MAX_SAMPLE_LENGTH};
    double sum = 0.0, log_sum = 0.0, mu = log(4096.0) - 0.5 * 0.5 / 2.0;
    int i;
    CHECK_EQ(dcp_lengths_lognormal(&d, 1, lengths, N, NULL), DCP_OK);
    for (i = 0; i < N; i++) {
        sum += (double)lengths[i];
        log_sum += log((double)lengths[i]);
    }
    /* mu = ln(mean) - sigma^2 / 2 makes the mean of the lengths the requested mean */
    CHECK_NEAR(sum / N, 4096.0, 0.005);
    CHECK_NEAR(log_sum / N, mu, 0.002);
}

static void lognormal_clips_and_repeats(void)
{
    enum { N = 50000 };
    static int64_t a[N], b[N], c[N];
    dcp_lognormal d = {4096.0, 1.1, 1024, 8192};
    double below = 0.0, expected_below;
    int i, differ = 0;
    CHECK_EQ(dcp_lengths_lognormal(&d, 42, a, N, NULL), DCP_OK);
    CHECK_EQ(dcp_lengths_lognormal(&d, 42, b, N, NULL), DCP_OK);
    CHECK_EQ(dcp_lengths_lognormal(&d, 43, c, N, NULL), DCP_OK);
    for (i = 0; i < N; i++) {
        CHECK(a[i] >= 1024 && a[i] <= 8192);
        CHECK(a[i] == b[i]);
        differ += a[i] != c[i];
        below += a[i] == 1024;
    }
    CHECK(differ > N / 2);
    /* P(L <= 1024) = Phi((ln 1024.5 - mu) / sigma); the mass at the clip matches it */
    expected_below = 0.5 * erfc(-((log(1024.5) - (log(4096.0) - 1.1 * 1.1 / 2)) / 1.1) / sqrt(2.0));
    CHECK_NEAR(below / N, expected_below, 0.01);
}

/* Same seed, same lengths on every platform: a digest of the first lengths of a fixed
   configuration, produced by this generator. The generator uses only integer arithmetic and
   basic IEEE operations, so a change here means a changed stream, not a platform quirk. */
static void lognormal_stream_is_pinned(void)
{
    int64_t lengths[64];
    dcp_lognormal d = {4096.0, 1.1, 1024, 8192};
    uint64_t digest = 1469598103934665603u;
    int i;
    CHECK_EQ(dcp_lengths_lognormal(&d, 42, lengths, 64, NULL), DCP_OK);
    for (i = 0; i < 64; i++) digest = (digest ^ (uint64_t)lengths[i]) * 1099511628211u;
    printf("lognormal digest %016llx, first lengths %lld %lld %lld %lld\n",
           (unsigned long long)digest, (long long)lengths[0], (long long)lengths[1],
           (long long)lengths[2], (long long)lengths[3]);
    CHECK(digest == UINT64_C(0x39ed4634a2b35395));
}

static void lognormal_rejects_bad_parameters(void)
{
    int64_t out[4];
    dcp_lognormal good = {4096.0, 1.0, 10, 100}, d;
    dcp_error error;
    d = good, d.mean = 0.0;
    CHECK_EQ(dcp_lengths_lognormal(&d, 1, out, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "mean");
    d = good, d.sigma = -1.0;
    CHECK_EQ(dcp_lengths_lognormal(&d, 1, out, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "sigma");
    d = good, d.sigma = NAN;
    CHECK_EQ(dcp_lengths_lognormal(&d, 1, out, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    d = good, d.min_length = 0;
    CHECK_EQ(dcp_lengths_lognormal(&d, 1, out, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "min 0");
    d = good, d.max_length = 5;
    CHECK_EQ(dcp_lengths_lognormal(&d, 1, out, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_lengths_lognormal(&good, 1, NULL, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_lengths_lognormal(&good, 1, out, -1, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_lengths_lognormal(NULL, 1, out, 4, &error), DCP_ERROR_INVALID_ARGUMENT);
}

static void loguniform_spans_the_range(void)
{
    enum { N = 100000 };
    dcp_rng rng;
    int64_t x, low = 0, high = 0;
    double log_sum = 0.0;
    int i;
    dcp_rng_seed(&rng, test_seed_for(8));
    for (i = 0; i < N; i++) {
        CHECK_EQ(dcp_rng_loguniform_length(&rng, 256, 2048, &x, NULL), DCP_OK);
        CHECK(x >= 256 && x <= 2048);
        low += x == 256;
        high += x == 2048;
        log_sum += log((double)x + 0.5);
    }
    CHECK(low > 0 && high > 0);
    CHECK_NEAR(log_sum / N, 0.5 * (log(256.0) + log(2049.0)), 0.01);
    CHECK_EQ(dcp_rng_loguniform_length(&rng, 5, 4, &x, NULL), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_rng_loguniform_length(&rng, 0, 4, &x, NULL), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_rng_loguniform_length(&rng, 7, 7, &x, NULL), DCP_OK);
    CHECK_EQ(x, 7);
}

/* Parses text and checks the lengths; returns the status. */
static dcp_status parse(const char *text, int64_t *expected, int32_t expected_count)
{
    int64_t *lengths = NULL;
    int32_t count = -1, i;
    dcp_error error;
    dcp_status status = dcp_lengths_parse(text, strlen(text), NULL, &lengths, &count, &error);
    if (status == DCP_OK) {
        CHECK_EQ(count, expected_count);
        for (i = 0; i < count && i < expected_count; i++) CHECK_EQ(lengths[i], expected[i]);
    } else {
        CHECK(lengths == NULL && count == 0);
    }
    dcp_free(NULL, lengths);
    return status;
}

static void parser_accepts_plain_and_csv(void)
{
    int64_t three[3] = {4096, 17, 250000}, two[2] = {10, 20};
    CHECK_EQ(parse("4096\n17\n250000\n", three, 3), DCP_OK);
    CHECK_EQ(parse("# lengths\n\n  4096 \r\n17# inline\n+250000", three, 3), DCP_OK);
    CHECK_EQ(parse("id,length,source\n0,4096,a\n1,17,b\n2,250000,c\n", three, 3), DCP_OK);
    CHECK_EQ(parse("\"sample\", \"Seq_Len\"\r\n1, 10\r\n2, 20\r\n", two, 2), DCP_OK);
    /* a header must name a known column: "abc\n200" is a typo, not a header (issue 15) */
    CHECK_EQ(parse("tokens_in_doc\n10\n20\n", two, 2), DCP_ERROR_PARSE);
    CHECK_EQ(parse("\xEF\xBB\xBFtokens\n10\n20\n", two, 2), DCP_OK); /* BOM, then a header */
    CHECK_EQ(parse("num_tokens,x\n10,a\n# comment row\n20,b\n", two, 2), DCP_OK);
}

/* Each malformed input is rejected with a message naming the line and the problem. */
static void parser_rejects_malformed_input(void)
{
    struct {
        const char *text, *needle;
    } cases[] = {
        {"", "empty input"},
        {"# only a comment\n\n", "empty input"},
        {"10\n0\n", "line 2: length 0 must be >= 1"},
        {"10\n-5\n", "line 2: length -5 must be >= 1"},
        {"10\n12a\n", "line 2: length \"12a\" is not a positive integer"},
        {"10\n1.5\n", "line 2"},
        {"10\n1e3\n", "not a positive integer"},
        {"4294967296\n", "exceeds the maximum 2147483647"},
        {"99999999999999999999999\n", "exceeds the maximum"},
        {"a,b\n1,2\n", "no length column"},
        {"id,length\n1,2\n3\n", "line 3: 1 CSV fields, the header has 2"},
        {"id,length\n1,\n", "empty length field"},
        {"10\n20 30\n", "line 2"},
        {"12a\n", "line 1: length \"12a\" is not a positive integer"},
        {".5\n", "line 1"},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t *lengths = NULL;
        int32_t count = 0;
        dcp_error error;
        dcp_status status = dcp_lengths_parse(cases[i].text, strlen(cases[i].text), NULL, &lengths,
                                              &count, &error);
        CHECK(status == DCP_ERROR_PARSE || status == DCP_ERROR_OVERFLOW);
        CHECK_CONTAINS(error.message, cases[i].needle);
        CHECK(lengths == NULL && count == 0);
    }
}

static void parser_handles_binary_and_null(void)
{
    const char binary[6] = {'1', '2', '\0', '3', '\n', '\xff'};
    int64_t *lengths = NULL;
    int32_t count = 0;
    dcp_error error;
    CHECK_EQ(dcp_lengths_parse(binary, sizeof binary, NULL, &lengths, &count, &error),
             DCP_ERROR_PARSE);
    CHECK_CONTAINS(error.message, "line 1");
    CHECK_EQ(dcp_lengths_parse(NULL, 5, NULL, &lengths, &count, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_lengths_parse(NULL, 0, NULL, &lengths, &count, &error), DCP_ERROR_PARSE);
    CHECK_EQ(dcp_lengths_parse("1", 1, NULL, NULL, &count, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* Random bytes and mutations of valid files: any status, never a crash (run under ASan). */
static void parser_survives_random_input(void)
{
    static const char *seeds[] = {"4096\n17\n", "id,length\n0,12\n", "# c\n+5\r\n"};
    char buffer[256];
    dcp_rng rng;
    int i;
    dcp_rng_seed(&rng, test_seed_for(31));
    for (i = 0; i < 20000; i++) {
        size_t size = (size_t)dcp_rng_below(&rng, sizeof buffer), k;
        const char *seed = seeds[i % 3];
        int64_t *lengths = NULL;
        int32_t count = 0;
        for (k = 0; k < size; k++)
            buffer[k] = k < strlen(seed) && dcp_rng_below(&rng, 4) ? seed[k]
                                                                  : (char)dcp_rng_below(&rng, 256);
        if (dcp_lengths_parse(buffer, size, NULL, &lengths, &count, NULL) == DCP_OK) {
            CHECK(count > 0);
            for (k = 0; k < (size_t)count; k++)
                CHECK(lengths[k] >= 1 && lengths[k] <= DCP_MAX_SAMPLE_LENGTH);
        }
        dcp_free(NULL, lengths);
    }
}

/* The round trip's file sits beside the program (argv[0] + ".input.csv"): the plain and the
   sanitizer builds run side by side under make test and must not share it. */
static char round_trip_path[4096] = "test_lengths.input.csv";

static void read_file_round_trip(void)
{
    const char *path = round_trip_path;
    FILE *f = fopen(path, "w");
    int64_t *lengths = NULL;
    int32_t count = 0;
    dcp_error error;
    CHECK(f != NULL);
    if (!f) return;
    fputs("seq_len\n100\n200\n300\n", f);
    fclose(f);
    CHECK_EQ(dcp_lengths_read_file(path, NULL, &lengths, &count, &error), DCP_OK);
    CHECK_EQ(count, 3);
    if (count == 3) CHECK_EQ(lengths[2], 300);
    dcp_free(NULL, lengths);
    remove(path);
    CHECK_EQ(dcp_lengths_read_file("build/no/such/file", NULL, &lengths, &count, &error),
             DCP_ERROR_IO);
    CHECK_CONTAINS(error.message, "build/no/such/file");
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"lognormal_follows_megatron_convention", lognormal_follows_megatron_convention},
        {"lognormal_clips_and_repeats", lognormal_clips_and_repeats},
        {"lognormal_stream_is_pinned", lognormal_stream_is_pinned},
        {"lognormal_rejects_bad_parameters", lognormal_rejects_bad_parameters},
        {"loguniform_spans_the_range", loguniform_spans_the_range},
        {"parser_accepts_plain_and_csv", parser_accepts_plain_and_csv},
        {"parser_rejects_malformed_input", parser_rejects_malformed_input},
        {"parser_handles_binary_and_null", parser_handles_binary_and_null},
        {"parser_survives_random_input", parser_survives_random_input},
        {"read_file_round_trip", read_file_round_trip},
    };
    if (argc > 0 && strlen(argv[0]) + sizeof ".input.csv" <= sizeof round_trip_path)
        snprintf(round_trip_path, sizeof round_trip_path, "%s.input.csv", argv[0]);
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
