/*
 * log - one line per event on stderr, filtered by level.
 *
 * The function that first detects an error logs it (at KVS_LOG_ERR, or
 * KVS_LOG_DEBUG for routine outcomes such as a corrupt block becoming a
 * miss); callers pass the code up without logging again.  The threshold
 * comes from KVS_LOG_LEVEL (error, warn, info, debug; default warn) or
 * kvs_log_set_level().
 */
#ifndef KVSTASH_LOG_H
#define KVSTASH_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

enum kvs_log_level {
	KVS_LOG_ERR = 0,
	KVS_LOG_WARN = 1,
	KVS_LOG_INFO = 2,
	KVS_LOG_DEBUG = 3,
};

void kvs_log_set_level(enum kvs_log_level level);

/*
 * kvs_log_set_sink - send the lines that pass the threshold to @sink
 * instead of stderr: it gets the level, the line without a newline, and
 * @arg.  NULL restores stderr.  Set it before other threads log (a program
 * sets it once, at start); @sink may be called from any thread.
 */
void kvs_log_set_sink(void (*sink)(enum kvs_log_level level, const char *line,
				   void *arg),
		      void *arg);
int kvs_log_enabled(enum kvs_log_level level);
void kvs_log(enum kvs_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
