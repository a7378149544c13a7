// SPDX-License-Identifier: GPL-2.0
/*
 * async-events: waits for a device's asynchronous events (ibv_get_async_event).
 *
 *   async-events DEVICE [-e EVENT[,EVENT...]] [-t SECONDS] [-- COMMAND [ARGS...]]
 *
 * Opens DEVICE, prints "ready" and, if a COMMAND is given, runs it (e.g. one that takes the
 * link down and up again); then waits until the EVENTs (default port-err,port-active) have
 * arrived in that order, at most SECONDS (default 30) in all. Events in between that are not
 * the next expected one are printed and otherwise ignored (a link toggle may also change
 * GIDs). Every event is acknowledged with ibv_ack_async_event. EVENT names: port-err,
 * port-active, gid-change, lid-change, pkey-change, device-fatal, client-reregister.
 * Exits 0 when all arrived (and COMMAND, if any, exited 0), 1 otherwise.
 */
#include <errno.h>
#include <getopt.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verbs-common.h"

extern char **environ;

static const struct {
	const char *name;
	enum ibv_event_type type;
} event_names[] = {
	{ "port-err", IBV_EVENT_PORT_ERR },
	{ "port-active", IBV_EVENT_PORT_ACTIVE },
	{ "gid-change", IBV_EVENT_GID_CHANGE },
	{ "lid-change", IBV_EVENT_LID_CHANGE },
	{ "pkey-change", IBV_EVENT_PKEY_CHANGE },
	{ "device-fatal", IBV_EVENT_DEVICE_FATAL },
	{ "client-reregister", IBV_EVENT_CLIENT_REREGISTER },
};

#define MAX_EXPECTED	16

static enum ibv_event_type parse_event(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(event_names) / sizeof(event_names[0]); i++)
		if (strcmp(event_names[i].name, name) == 0)
			return event_names[i].type;
	tp_die("unknown event name '%s'", name);
}

static void usage(void)
{
	fprintf(stderr, "usage: %s DEVICE [-e EVENT[,EVENT...]] [-t SECONDS] [-- COMMAND [ARGS...]]\n",
		tp_prog);
	exit(2);
}

int main(int argc, char **argv)
{
	enum ibv_event_type expected[MAX_EXPECTED];
	char default_events[] = "port-err,port-active";
	char *events_arg = default_events, *tok, *save;
	const char *dev_name;
	unsigned int nexpected = 0, seen = 0;
	unsigned long seconds = 30;
	struct ibv_context *ctx;
	double deadline;
	pid_t child = 0;
	int opt, status;

	tp_prog = "async-events";
	if (argc < 2 || argv[1][0] == '-')
		usage();
	/* DEVICE first; the options after it; everything after "--" is the command. */
	dev_name = argv[1];
	argc--;
	argv++;
	while ((opt = getopt(argc, argv, "+e:t:h")) != -1) {
		switch (opt) {
		case 'e':
			events_arg = optarg;
			break;
		case 't':
			seconds = tp_parse_ulong("SECONDS", optarg, 1, 86400);
			break;
		default:
			usage();
		}
	}
	if (optind < argc && strcmp(argv[optind - 1], "--") != 0)
		usage();	/* a stray argument that is not after "--" */
	for (tok = strtok_r(events_arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (nexpected == MAX_EXPECTED)
			tp_die("at most %d events", MAX_EXPECTED);
		expected[nexpected++] = parse_event(tok);
	}
	if (!nexpected)
		usage();

	ctx = tp_open_context(dev_name);
	tp_set_nonblock(ctx->async_fd);
	tp_note("ready: waiting %lu s for %u event(s) on %s", seconds, nexpected, dev_name);
	deadline = tp_now() + seconds;
	if (optind < argc) {
		int ret = posix_spawnp(&child, argv[optind], NULL, NULL, &argv[optind], environ);

		if (ret)
			tp_die("cannot run %s: %s", argv[optind], strerror(ret));
	}

	while (seen < nexpected) {
		struct ibv_async_event ev;

		if (!tp_next_async_event(ctx, deadline, &ev))
			tp_die("%u of %u expected event(s) did not arrive within %lu s (next: %s)",
			       nexpected - seen, nexpected, seconds,
			       ibv_event_type_str(expected[seen]));
		if (ev.event_type == expected[seen]) {
			seen++;
			tp_note("event %u of %u: %s (port %d)", seen, nexpected,
				ibv_event_type_str(ev.event_type), ev.element.port_num);
		} else {
			tp_note("other event: %s (ignored)", ibv_event_type_str(ev.event_type));
		}
		ibv_ack_async_event(&ev);
	}

	if (child) {
		if (waitpid(child, &status, 0) < 0)
			tp_die("waitpid: %s", strerror(errno));
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			tp_die("%s failed (status %#x)", argv[optind], status);
	}
	if (ibv_close_device(ctx))
		tp_die("ibv_close_device failed");
	printf("async-events: PASS: %u event(s) in order on %s\n", nexpected, dev_name);
	return 0;
}
