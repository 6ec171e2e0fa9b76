/*
 * ahead.c - who is ahead of us in the queue, at a cost that does not grow
 * with the queue.
 *
 * The tickets that matter are the older ones whose candidates intersect
 * ours; we wait behind the youngest of them that is alive. Listing queue/
 * to find them costs every arriving job time in proportion to everything
 * in the directory, dead tickets of other users included (which nobody
 * else may remove from the sticky directory). Instead, ticket N is found
 * by its index link queue/<N:016x> (queue.c), and we walk down from our
 * own number to the queue's marks: for each device d, every ticket below
 * low[d] whose candidates include d is known to be over. A ticket that
 * reaches the head and is granted raises the marks of its candidates to
 * its own number + 1 before it lets go of its ticket, so the successor it
 * wakes has nothing left to walk. In a queue of one pool, an arriving job
 * reads one index and probes one ticket; a woken one reads one index or
 * none.
 *
 * Only when the walk is long without meeting a live ticket (marks
 * unknown, as after an older version or a damaged counter rewrote them,
 * or a device nobody queued for in a long time) is the directory listed,
 * once, and the marks are raised from what it shows, so the next
 * claimant walks little.
 *
 * Soundness of skipping: a ticket below low[d] that includes device d is
 * over, since tickets are never reused and an over ticket stays over;
 * marks only grow and are only raised by someone who saw that.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Past this many numbers walked without a live ticket, a listing is
 * cheaper. */
#define WALK_MAX 512

/* The lowest mark among our candidates: below it nothing matters. A mark
 * above our own number cannot be right (nobody behind us is granted
 * before us): the marks were damaged, so nothing is known, and all of
 * them are forgotten (zeroed), not only the floor: the walk and the
 * listing also pass tickets by them one by one (passed()). */
static uint64_t floor_of(struct gm__marks *m, uint64_t mask, uint64_t seq)
{
	uint64_t f = UINT64_MAX;

	for (int i = 0; i < GM_MAX_DEVICES; i++) {
		if (!(mask & (UINT64_C(1) << i)))
			continue;
		if (m->low[i] > seq) {
			memset(m, 0, sizeof *m);
			return 0;
		}
		if (m->low[i] < f)
			f = m->low[i];
	}
	return f == UINT64_MAX ? 0 : f;
}

/* Ticket `seq` is over by the marks for every device it shares with us. */
static int passed(const struct gm__marks *m, uint64_t mask, uint64_t tmask,
		  uint64_t seq)
{
	uint64_t both = mask & tmask;

	for (int i = 0; i < GM_MAX_DEVICES; i++)
		if ((both & (UINT64_C(1) << i)) && seq < m->low[i])
			return 1;
	return 0;
}

/*
 * Probe ticket `name` (user `uid`, number `seq`): 1 alive (its descriptor
 * in *fd), 0 over or not a ticket (a dead one of ours is removed), or
 * -errno with a message when it may be alive but cannot be opened: not
 * knowing, we must not pass it.
 */
static int probe(const struct gm__dir *d, const char *name, unsigned uid,
		 uint64_t seq, int *fd, char *err, size_t errlen)
{
	int f = gm__ticket_open(d->queue, name, uid, err, errlen);

	*fd = -1;
	if (f == -ENOENT && uid == (unsigned)geteuid()) {
		/* Gone, but its index may be left (a claim of ours was
		 * killed between the two unlinks): remove it too, if it names
		 * this ticket (a listed name may be a dead twin of the
		 * number's live ticket, queue.c: gm__index_unlink). */
		gm__index_unlink(d, name, seq);
	}
	if (f == -ENOENT || f == GM__FOREIGN)
		return 0; /* gone (granted, gave up, cleaned), or someone
			   * else's file under such a name */
	if (f < 0)
		return f;
	gm__track(f);
	if (gm__probe(f, F_WRLCK, 0) == F_UNLCK) {
		/* Dead: its waiter died without cleaning up. Tickets are never
		 * reused, so a dead one stays dead; remove ours. */
		gm__close(f);
		if (uid == (unsigned)geteuid())
			gm__ticket_unlink(d, name, seq);
		return 0;
	}
	*fd = f;
	return 1;
}

/* Walk down from t->seq - 1 to `floor` by the index links: our doorbell,
 * -1 (at the head), -errno, or GM__LONG after WALK_MAX numbers without a
 * live ticket (then a listing is cheaper). */
#define GM__LONG (-EXFULL)
static int walk(const struct gm__dir *d, const struct gm__ticket *t,
		uint64_t mask, const struct gm__marks *m, uint64_t floor,
		int *ahead, char *err, size_t errlen)
{
	char index[GM__INDEX_LEN], name[256];
	int steps = 0;

	for (uint64_t s = t->seq; s-- > floor && s > 0;) {
		uint64_t seq, tmask;
		unsigned uid;
		int pid, want, fd, rc;
		ssize_t n;

		if (++steps > WALK_MAX)
			return GM__LONG;
		gm__index_name(index, s);
		n = readlinkat(d->queue, index, name, sizeof name - 1);
		if (n < 0) {
			if (errno == ENOENT || errno == EINVAL)
				continue; /* gone, or not a link: not an index */
			return gm__fail(-errno, err, errlen,
					"cannot read queue/%s: %s", index,
					strerror(errno));
		}
		name[n] = '\0';
		/* An index names a ticket of its own number, or nothing. */
		if (gm__ticket_parse(name, &seq, &uid, &pid, &want, &tmask,
				     NULL, 0) < 0 || seq != s ||
		    !(tmask & mask) || passed(m, mask, tmask, s))
			continue;
		rc = probe(d, name, uid, s, &fd, err, errlen);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			/* At most every number between the floor and this one
			 * is a live waiter ahead of us. */
			*ahead = (int)(s - floor + 1 < 1000000 ? s - floor + 1 :
				       1000000);
			return fd;
		}
	}
	return -1;
}

struct entry {
	uint64_t seq, mask;
	unsigned uid;
	char name[256];
};

static int cmp_entry_desc(const void *x, const void *y)
{
	const struct entry *a = x, *b = y;
	return a->seq < b->seq ? 1 : a->seq > b->seq ? -1 : 0;
}

/*
 * The listing: every older intersecting ticket, youngest first. Probes
 * all of them (once, on a long walk only) so that, besides our doorbell,
 * it learns the oldest live one per device and raises the marks to it.
 */
static int scan(const struct gm__dir *d, const struct gm__ticket *t,
		uint64_t mask, const struct gm__marks *m, int *ahead,
		char *err, size_t errlen)
{
	DIR *dir;
	struct dirent *de;
	struct entry *v = NULL;
	struct gm__marks *to;
	size_t n = 0, cap = 0;
	int found = -1, rc = 0;

	dir = gm__listdir(d->queue);
	if (!dir)
		return gm__fail(-errno, err, errlen, "cannot read queue/: %s",
				strerror(errno));
	while ((de = readdir(dir)) != NULL) {
		struct entry e;
		int pid, want;

		if (gm__ticket_parse(de->d_name, &e.seq, &e.uid, &pid, &want,
				     &e.mask, NULL, 0) < 0)
			continue;
		if (e.seq >= t->seq || !(e.mask & mask) ||
		    passed(m, mask, e.mask, e.seq))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct entry *nv = realloc(v, nc * sizeof *v);
			if (!nv) {
				free(v);
				closedir(dir);
				return gm__fail(-ENOMEM, err, errlen,
						"out of memory reading queue/");
			}
			v = nv;
			cap = nc;
		}
		snprintf(e.name, sizeof e.name, "%s", de->d_name);
		v[n++] = e;
	}
	closedir(dir);
	if (n > 1)
		qsort(v, n, sizeof *v, cmp_entry_desc);
	/* Without a live ticket on device d below us, all of it is over up
	 * to our own number (ours is still alive: not past it). */
	to = calloc(1, sizeof *to);
	for (int i = 0; to && i < GM_MAX_DEVICES; i++)
		if (mask & (UINT64_C(1) << i))
			to->low[i] = t->seq;
	for (size_t i = 0; i < n; i++) {
		int fd;

		rc = probe(d, v[i].name, v[i].uid, v[i].seq, &fd, err, errlen);
		if (rc < 0)
			break;
		if (rc == 0)
			continue;
		if (found < 0)
			found = fd;
		else
			gm__close(fd);
		++*ahead;
		for (int k = 0; to && k < GM_MAX_DEVICES; k++)
			if (v[i].mask & mask & (UINT64_C(1) << k))
				to->low[k] = v[i].seq; /* youngest first: ends
							* at the oldest */
	}
	free(v);
	if (rc < 0) {
		free(to);
		if (found >= 0)
			gm__close(found);
		return rc;
	}
	if (to)
		gm__marks_raise(t->cfd, to);
	free(to);
	return found;
}

int gm__ticket_ahead(const struct gm__dir *d, const struct gm__ticket *t,
		     uint64_t mask, int *ahead, char *err, size_t errlen)
{
	struct gm__marks *m = malloc(sizeof *m); /* heap: small stacks */
	uint64_t floor;
	int rc;

	*ahead = 0;
	if (!m)
		return gm__fail(-ENOMEM, err, errlen, "out of memory");
	gm__marks_read(t->cfd, m); /* on failure all zero: nothing known */
	floor = floor_of(m, mask, t->seq);
	rc = walk(d, t, mask, m, floor, ahead, err, errlen);
	if (rc == GM__LONG)
		rc = scan(d, t, mask, m, ahead, err, errlen);
	free(m);
	return rc;
}

/* The every-16th-claim and `gpumutex init` cleanup (internal.h): here,
 * beside the walk, because it removes what the walk would, by the same
 * rules. */
void gm__queue_sweep(const struct gm__dir *d, uid_t only, uint64_t below)
{
	DIR *dir;
	struct dirent *de;

	/* Only numbers the counter has passed (gm__index_unlink): at or
	 * above it, an index removed could be made again for another
	 * ticket while a remover still holds the old link. */
	if (below == 0)
		below = gm__counter_now(d);
	if (below == 0)
		return;
	dir = gm__listdir(d->queue);
	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL) {
		const char *nm = de->d_name;
		uint64_t seq, mask;
		unsigned uid;
		int pid, want, fd;

		if (gm__ticket_parse(nm, &seq, &uid, &pid, &want, &mask, NULL,
				     0) == 0) {
			if ((only != (uid_t)-1 && uid != (unsigned)only) ||
			    seq >= below)
				continue;
			/* A ticket nobody holds is over for good. */
			fd = gm__ticket_open(d->queue, nm, uid, NULL, 0);
			if (fd >= 0 && gm__probe(fd, F_WRLCK, 0) == F_UNLCK)
				gm__ticket_unlink(d, nm, seq);
			if (fd >= 0)
				close(fd);
		} else if (strlen(nm) == 16 &&
			   gm_parse_uint(nm, 16, UINT64_MAX, &seq) == 0 &&
			   seq < below) {
			/* An index whose ticket is gone. */
			char name[256];
			struct stat st;
			ssize_t n = readlinkat(d->queue, nm, name,
					       sizeof name - 1);
			if (n < 0)
				continue;
			name[n] = '\0';
			if (only != (uid_t)-1 &&
			    (gm__fstatat(d->queue, nm, &st,
					 AT_SYMLINK_NOFOLLOW) < 0 ||
			     st.st_uid != only))
				continue;
			if (gm__fstatat(d->queue, name, &st,
					AT_SYMLINK_NOFOLLOW) < 0 &&
			    errno == ENOENT)
				unlinkat(d->queue, nm, 0);
		}
	}
	closedir(dir);
}
