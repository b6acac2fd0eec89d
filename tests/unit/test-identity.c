/* SPDX-License-Identifier: MIT */
/* identity.c: the unit of a cgroup, and a peer's identity from a socket pair. */
#include "config.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "identity.h"
#include "tap.h"
#include "util.h"

static void unit_is(const char *text, int want_r, const char *want) {
        char buf[CONF_UNIT_MAX] = "", shown[512];
        int r = identity_cgroup_unit(text, buf, sizeof(buf));

        kvt_escape(text, shown, sizeof(shown));
        TAP_EQ_INT(r, want_r, "cgroup unit of \"%s\": %d", shown, want_r);
        if (want)
                TAP_EQ_STR(buf, want, "cgroup unit of \"%s\" is %s", shown, want);
}

int main(void) {
        struct identity id;
        int sv[2];

        unit_is("0::/system.slice/vllm.service\n", 0, "vllm.service");
        unit_is("0::/system.slice/vllm.service/worker\n", 0, "vllm.service");
        unit_is("0::/machine.slice/x.slice/run-u7.scope", 0, "run-u7.scope");
        /* A user's own units are below user@UID.service: that is their system unit. */
        unit_is("0::/user.slice/user-1001.slice/user@1001.service/app.slice/vllm.service\n", 0,
                "user@1001.service");
        unit_is("0::/\n", -ENXIO, NULL);
        unit_is("0::/system.slice\n", -ENXIO, NULL);
        unit_is("0::/kubepods/besteffort/pod1\n", -ENXIO, NULL);
        unit_is("12:memory:/x\n1:name=systemd:/system.slice/old.service\n", 0, "old.service");
        unit_is("1:name=systemd:/system.slice/old.service\n0::/system.slice/new.service\n", 0,
                "new.service");
        unit_is("", -ENXIO, NULL);

        {
                /* fields 1 .. 21, then starttime 4242, then the rest; a comm with ") (" in it */
                const char *stat = "77 (a) (b c) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 4242 "
                                   "1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0\n";
                uint64_t t = 0, t2 = 0;

                TAP_EQ_INT(identity_stat_start_time(stat, &t), 0, "start time of a stat line");
                TAP_EQ_INT((long long)t, 4242, "is field 22, counted from the last ')'");
                TAP_EQ_INT(identity_stat_start_time("77 (a) S 1 77", &t), -EINVAL, "a cut stat line: EINVAL");
                TAP_EQ_INT(identity_stat_start_time("no parenthesis", &t), -EINVAL, "no comm: EINVAL");
                TAP_EQ_INT(identity_pid_start_time("/proc", getpid(), &t), 0, "our own start time");
                TAP_EQ_INT(identity_pid_start_time("/proc", getpid(), &t2), 0, "read again");
                TAP_OK(t > 0 && t == t2, "it is positive and stays the same");
                TAP_EQ_INT(identity_pid_start_time("/proc", 0x3ffffff0, &t), -ESRCH, "no such pid: ESRCH");
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
                return 99;
        TAP_EQ_INT(identity_from_socket(sv[0], true, "/proc", &id), 0, "identity of a socket pair");
        TAP_EQ_INT(id.pid, getpid(), "its pid is ours");
        TAP_EQ_INT(id.uid, getuid(), "its uid is ours");
        TAP_OK(identity_in_group(&id, getgid()), "our group is its group");
        TAP_OK(!identity_in_group(&id, 4000000000u), "not in a group we lack");
        close(sv[0]);
        close(sv[1]);
        return tap_done();
}
