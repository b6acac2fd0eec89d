/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "client.h"
#include "heat.h"
#include "kvtier.h"
#include "protocol.h"
#include "regions.h"
#include "shim.h"

KVT_EXPORT int kvtier_hint(const void *ptr, size_t len, int hint) {
        struct shim_region r;
        struct kvt_hint h;
        uintptr_t start = (uintptr_t)ptr, end;

        if (hint < KVTIER_HINT_HOT || hint > KVTIER_HINT_DONE)
                return -EINVAL;
        if (len == 0 || start + len < start)
                return -EINVAL;
        if (regions_lookup(ptr, &r) < 0)
                return -ENOENT;
        end = start + len;
        if (end > r.base + r.span_bytes)
                return -EINVAL; /* the range runs past the allocation */
        /* A use goes through the shared heat table, never one message per
         * use.  HOT is not a use but a standing order (until COLD or DONE)
         * that only the daemon's books can hold: it is a message. */
        if (hint == KVTIER_HINT_WILL_NEED && (kvt_shim()->cfg.heat_sources & HEAT_SRC_HINT) &&
            heat_touch(start, len, 1) > 0)
                return 0;
        h = (struct kvt_hint){
                .region_id = r.id,
                .first_chunk = (uint32_t)((start - r.base) >> KVT_CHUNK_SHIFT),
                .kind = (uint32_t)hint,
        };
        h.n_chunks = (uint32_t)(((end - r.base - 1) >> KVT_CHUNK_SHIFT) + 1 - h.first_chunk);
        /* A standing order is kept here too, and told again to a daemon that
         * registers the region later; noted before the registered flag is
         * read, so that it is either sent now or found by the registration. */
        if (hint != KVTIER_HINT_WILL_NEED) {
                int ret = regions_note_hint(ptr, h.first_chunk, h.n_chunks, hint, &r);

                if (ret < 0)
                        return ret;
        }
        if (!r.registered)
                return -ENOTCONN;
        return client_send(KVT_MSG_HINT, &h, sizeof(h));
}
