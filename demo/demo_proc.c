/*
 * demo_proc.c - the processes of `kvstash demo` (demo.h): started so that
 * none outlives the demo -- each in a process group of its own (the demo
 * decides when it stops, also on Ctrl-C), each asked by the kernel to
 * terminate when the demo's process dies (PR_SET_PDEATHSIG), each stopped
 * with SIGTERM and, past a grace period, SIGKILL, and reaped -- and the
 * temporary directory removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "demo.h"

volatile int demo_interrupted;

static void on_signal(int sig)
{
	demo_interrupted = sig;
}

void demo_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	/* a node that died leaves its pipe closed: EPIPE, not a signal */
	signal(SIGPIPE, SIG_IGN);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child(struct demo_proc *p, char *const argv[], int out_w,
		  pid_t parent)
{
	int fd;

	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(127); /* the demo is gone already */
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	fd = open("/dev/null", O_RDONLY);
	if (fd >= 0) {
		dup2(fd, 0);
		close(fd);
	}
	fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (fd < 0)
		_exit(127);
	dup2(fd, 2);
	dup2(out_w >= 0 ? out_w : fd, 1);
	close(fd);
	execv(argv[0], argv);
	_exit(127);
}

int demo_spawn(struct demo_proc *p, char *const argv[], bool pipe_out)
{
	pid_t parent = getpid(), pid;
	int fds[2] = { -1, -1 };

	p->out = -1;
	p->reaped = false;
	p->n_facts = 0;
	p->line_len = 0;
	if (pipe_out && pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		if (pipe_out) {
			close(fds[0]);
			close(fds[1]);
		}
		return err;
	}
	if (pid == 0)
		child(p, argv, fds[1], parent);
	/* the child may not have left our group yet: the demo's own signal
	 * to the group must not reach it (setpgid in both, as shells do) */
	setpgid(pid, pid);
	p->pid = pid;
	if (pipe_out) {
		close(fds[1]);
		p->out = fds[0];
	}
	return 0;
}

bool demo_running(struct demo_proc *p)
{
	int status;

	if (p->pid <= 0 || p->reaped)
		return false;
	if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
		p->reaped = true;
		p->status = status;
		return false;
	}
	return true;
}

void demo_stop(struct demo_proc *p, int grace_ms)
{
	struct timespec pause = { 0, 5 * 1000 * 1000 };
	int waited = 0;

	if (!p || p->pid <= 0)
		return;
	if (demo_running(p))
		kill(p->pid, SIGTERM);
	while (demo_running(p)) {
		if (waited >= grace_ms) {
			kill(p->pid, SIGKILL);
			if (waitpid(p->pid, &p->status, 0) == p->pid)
				p->reaped = true;
			break;
		}
		nanosleep(&pause, NULL);
		waited += 5;
	}
	if (p->out >= 0) {
		close(p->out);
		p->out = -1;
	}
}

const char *demo_status(const struct demo_proc *p, char *buf, size_t size)
{
	if (!p->reaped)
		snprintf(buf, size, "running");
	else if (WIFEXITED(p->status))
		snprintf(buf, size, "exit %d", WEXITSTATUS(p->status));
	else if (WIFSIGNALED(p->status))
		snprintf(buf, size, "signal %d", WTERMSIG(p->status));
	else
		snprintf(buf, size, "status %d", p->status);
	return buf;
}

const char *demo_last_log_line(const struct demo_proc *p, char *buf,
			       size_t size)
{
	FILE *f = fopen(p->log, "r");
	char line[1024];

	buf[0] = '\0';
	if (!f)
		return buf;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		/* a rule (the end of a backtrace) says nothing */
		if (line[strspn(line, "=- \t")])
			snprintf(buf, size, "%s", line);
	}
	fclose(f);
	return buf;
}

static int remove_entry(const char *path, const struct stat *st, int type,
			struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int demo_rmtree(const char *dir)
{
	return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0
								      : -errno;
}
