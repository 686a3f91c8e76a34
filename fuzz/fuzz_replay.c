/*
 * fuzz_replay.c - runs a fuzz target (linked in beside it, see
 * fuzz_target.h) over files, so the seed corpora (and any crash file a
 * fuzzing run leaves) are exercised by every build, with or without clang.
 *
 * Usage: fuzz_replay_<target> PATH...   (files, or directories of files)
 * A file named ok-* must be accepted and one named bad-* refused; others
 * (fuzzer finds) only have to run clean.  Exit 0 when all files behave,
 * 1 otherwise or when no file was found.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_target.h"
#include "kvstash/error.h"

struct replay_stats {
	unsigned files;
	unsigned failures;
};

/* Reads the whole of @path into a malloc'd buffer. */
static int read_file(const char *path, uint8_t **out, size_t *out_len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	int rc = 0;

	if (f == NULL)
		return -errno;
	for (;;) {
		size_t got;

		if (len == cap) {
			uint8_t *grown = realloc(buf, cap ? 2 * cap : 4096);

			if (grown == NULL) {
				rc = -ENOMEM;
				goto out_close;
			}
			buf = grown;
			cap = cap ? 2 * cap : 4096;
		}
		got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f))
		rc = -EIO;
out_close:
	fclose(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*out = buf;
	*out_len = len;
	return 0;
}

static void replay_file(const char *path, struct replay_stats *st)
{
	const char *base = strrchr(path, '/');
	uint8_t *data = NULL;
	size_t len = 0;
	int rc, bad;

	base = base ? base + 1 : path;
	rc = read_file(path, &data, &len);
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", path, kvs_strerror(rc));
		st->failures++;
		return;
	}
	rc = kvs_fuzz_target_run(data, len);
	free(data);
	st->files++;
	bad = (strncmp(base, "ok-", 3) == 0 && rc != 0) ||
	      (strncmp(base, "bad-", 4) == 0 && rc == 0);
	printf("%s %s: %s\n", bad ? "FAIL" : "ok  ", base,
	       rc ? kvs_strerror(rc) : "accepted");
	if (bad)
		st->failures++;
}

static void replay_dir(const char *dir, struct replay_stats *st)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);

	if (n < 0) {
		fprintf(stderr, "%s: %s\n", dir, strerror(errno));
		st->failures++;
		return;
	}
	for (int i = 0; i < n; i++) {
		char path[4096];

		if (names[i]->d_name[0] != '.' &&
		    snprintf(path, sizeof(path), "%s/%s", dir,
			     names[i]->d_name) < (int)sizeof(path))
			replay_file(path, st);
		free(names[i]);
	}
	free(names);
}

int main(int argc, char **argv)
{
	struct replay_stats st = { 0 };

	for (int i = 1; i < argc; i++) {
		struct stat sb;

		if (stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode))
			replay_dir(argv[i], &st);
		else
			replay_file(argv[i], &st);
	}
	printf("%u files, %u failures\n", st.files, st.failures);
	return st.files == 0 || st.failures ? 1 : 0;
}
