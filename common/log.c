/*
 * log.c - the level-filtered stderr logger behind include/kvstash/log.h.
 * The threshold is read once from KVS_LOG_LEVEL unless set explicitly;
 * a program may route the lines elsewhere (kvs_log_set_sink).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstash/log.h"

static int log_threshold = -1;
static void (*log_sink)(enum kvs_log_level, const char *, void *);
static void *log_sink_arg;

static int threshold_from_env(void)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	const char *s = getenv("KVS_LOG_LEVEL");

	if (s != NULL)
		for (int i = 0; i < 4; i++)
			if (strcmp(s, names[i]) == 0)
				return i;
	return KVS_LOG_WARN;
}

void kvs_log_set_level(enum kvs_log_level level)
{
	log_threshold = (int)level;
}

void kvs_log_set_sink(void (*sink)(enum kvs_log_level level, const char *line,
				   void *arg),
		      void *arg)
{
	log_sink = sink;
	log_sink_arg = arg;
}

int kvs_log_enabled(enum kvs_log_level level)
{
	if (log_threshold < 0)
		log_threshold = threshold_from_env();
	return (int)level <= log_threshold;
}

void kvs_log(enum kvs_log_level level, const char *fmt, ...)
{
	static const char *const tags[] = { "error", "warn", "info", "debug" };
	char line[1024];
	va_list ap;

	if (!kvs_log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (log_sink != NULL) {
		log_sink(level, line, log_sink_arg);
		return;
	}
	/* One fputs per line so concurrent threads do not interleave. */
	fprintf(stderr, "kvstash: %s: %s\n", tags[level], line);
}
