/*
 * kernel_vecgate_ipsec: charon's kernel_ipsec_t backed by vecgate's JSON API.
 * See kernel_vecgate_ipsec.h.
 */

#include "kernel_vecgate_ipsec.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <daemon.h>
#include <collections/linked_list.h>
#include <crypto/rngs/rng.h>
#include <processing/jobs/callback_job.h>
#include <threading/mutex.h>
#include <threading/rwlock.h>

/** vecgate answers quickly; never let a stuck socket block a charon thread */
#define REQUEST_TIMEOUT_S 5
/** longest answer line we read (add/del answers are short; the list of all
 * SAs read at start-up is about 500 bytes an SA) */
#define MAX_REPLY (4 << 20)

/* SPIs we hand out: a block of its own, so they are easy to tell apart */
#define SPI_BASE 0xc0000000
#define SPI_MASK 0x0fffffff

/** vecgate reports no lifetime events: how often we read the counts of SAs
 * that have a byte or packet limit (ms) */
#define POLL_MS 1000

/** state of one index of our range */
typedef enum {
	INDEX_FREE = 0,
	/** one of our SAs uses it */
	INDEX_OURS,
	/** vecgate refused it (e.g. a statically configured SA has it) */
	INDEX_TAKEN,
} index_state_t;

/** an SA we added, or an SPI get_spi() reserved (index < 0) */
typedef struct {
	uint32_t spi;		/* network order, as charon passes it */
	host_t *dst;
	int64_t index;
	/** unique for each SA added (0: a reservation), so a scheduled job never
	 * takes a later SA with the same SPI or index for the one it was meant for */
	u_int id;
	bool inbound;
	/** charon's byte and packet limits (0: none); vecgate enforces the hard
	 * ones, we report both */
	uint64_t rekey_bytes, life_bytes, rekey_packets, life_packets;
	/** charon wants the soft expire once */
	bool soft_sent;
	/** the byte count query_sa() last saw, and when it saw it grow
	 * (monotonic seconds; 0: not yet) */
	uint64_t last_bytes;
	time_t last_use;
} sa_entry_t;

typedef struct private_kernel_vecgate_ipsec_t private_kernel_vecgate_ipsec_t;

/**
 * What our scheduled jobs hold on to instead of the backend: a job may run, or
 * be destroyed, after the backend is gone (charon shutting down).
 */
typedef struct {
	/** NULL once the backend is destroyed */
	private_kernel_vecgate_ipsec_t *backend;
	/** read-locked by a job while it uses backend, write-locked to clear it */
	rwlock_t *lock;
	/** one for the backend, one for each job */
	refcount_t refs;
} anchor_t;

struct private_kernel_vecgate_ipsec_t {

	/** public interface */
	kernel_vecgate_ipsec_t public;

	/** charon calls us from many threads: guards everything below. Requests
	 * to vecgate are made with it held, so an index is never handed out twice
	 * and our table always matches what vecgate accepted. */
	mutex_t *mutex;

	/** vecgate's API socket */
	char *socket;

	/** our index range: first_index .. first_index + indexes - 1 */
	uint32_t first_index;
	uint32_t indexes;
	/** one index_state_t per index of the range */
	uint8_t *index_state;

	/** "strict", "loose" or "off" */
	char *urpf;

	/** sa_entry_t, ours only */
	linked_list_t *sas;

	/** for SPIs */
	rng_t *rng;

	/** for our jobs (lifetimes) */
	anchor_t *anchor;

	/** the id of the last SA added */
	u_int last_id;

	/** a job polls the counts of SAs with byte or packet limits */
	bool polling;
};

/* ------------------------------------------------------------------------ */
/* a growing string for the JSON requests */

typedef struct {
	char *buf;
	size_t len;
	size_t size;
	bool failed;
} jbuf_t;

static void jb_add(jbuf_t *b, const char *fmt, ...)
{
	va_list args;
	int n;

	while (!b->failed)
	{
		va_start(args, fmt);
		n = vsnprintf(b->buf ? b->buf + b->len : NULL,
					  b->buf ? b->size - b->len : 0, fmt, args);
		va_end(args);
		if (n < 0)
		{
			b->failed = TRUE;
			return;
		}
		if (b->buf && b->len + n < b->size)
		{
			b->len += n;
			return;
		}
		/* grow by hand instead of realloc(): the buffer may hold key bytes,
		 * which must not be left behind in freed memory */
		{
			size_t size = max(b->size * 2, b->len + n + 256);
			char *buf = malloc(size);

			if (b->buf)
			{
				memcpy(buf, b->buf, b->len + 1);
				memwipe(b->buf, b->size);
				free(b->buf);
			}
			else
			{
				buf[0] = '\0';
			}
			b->buf = buf;
			b->size = size;
		}
	}
}

static void jb_free(jbuf_t *b)
{
	if (b->buf)
	{
		memwipe(b->buf, b->size);
		free(b->buf);
	}
	*b = (jbuf_t){};
}

/** append the hex form of a key, wiping the temporary copy */
static void jb_hex(jbuf_t *b, chunk_t key)
{
	chunk_t hex;

	if (!key.len)
	{
		return;
	}
	hex = chunk_to_hex(key, NULL, FALSE);
	jb_add(b, "%.*s", (int)hex.len, hex.ptr);
	chunk_clear(&hex);
}

/** an address as text, no port */
static bool addr_str(host_t *host, char *buf, size_t len)
{
	chunk_t addr = host->get_address(host);
	int family = host->get_family(host);

	if ((family != AF_INET && family != AF_INET6) ||
		!inet_ntop(family, addr.ptr, buf, len))
	{
		return FALSE;
	}
	return TRUE;
}

/* ------------------------------------------------------------------------ */
/* talking to vecgate */

/** *error = an allocated message */
static void set_error(char **error, const char *fmt, ...)
{
	char msg[512];
	va_list args;

	va_start(args, fmt);
	vsnprintf(msg, sizeof(msg), fmt, args);
	va_end(args);
	*error = strdup(msg);
}

/**
 * Send one request, read the one-line answer. SUCCESS if vecgate said ok;
 * otherwise FAILED with *error set (allocated) to vecgate's error text or
 * to why the exchange itself failed.
 */
static status_t request(private_kernel_vecgate_ipsec_t *this, char *json,
						char **error, char **answer)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = REQUEST_TIMEOUT_S };
	char *reply = NULL, *pos, *end;
	size_t len = 0, size = 0, todo;
	ssize_t n = -1;
	int fd;

	*error = NULL;
	if (strlen(this->socket) >= sizeof(addr.sun_path))
	{
		*error = strdup("socket path too long");
		return FAILED;
	}
	strcpy(addr.sun_path, this->socket);

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		set_error(error, "socket: %s", strerror(errno));
		return FAILED;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr*)&addr, sizeof(addr)) < 0)
	{
		set_error(error, "connect to %s: %s", this->socket, strerror(errno));
		close(fd);
		return FAILED;
	}

	/* the request, then the newline that ends it */
	for (pos = json, todo = strlen(json); todo; pos += n, todo -= n)
	{
		n = send(fd, pos, todo, MSG_NOSIGNAL);
		if (n <= 0)
		{
			goto io_error;
		}
	}
	if (send(fd, "\n", 1, MSG_NOSIGNAL) != 1)
	{
		goto io_error;
	}

	/* read up to the first newline */
	while (TRUE)
	{
		if (size - len < 1024)
		{
			if (size >= MAX_REPLY)
			{
				*error = strdup("answer too long");
				goto failed;
			}
			size += 4096;
			reply = realloc(reply, size);
		}
		n = recv(fd, reply + len, size - len - 1, 0);
		if (n < 0 && errno == EINTR)
		{
			continue;
		}
		if (n <= 0)
		{
			if (n == 0 && len)
			{	/* closed without a newline: take what we have */
				break;
			}
			goto io_error;
		}
		len += n;
		reply[len] = '\0';
		if (memchr(reply + len - n, '\n', n))
		{
			break;
		}
	}
	close(fd);
	reply[len] = '\0';

	/* {"ok":true,...} or {"ok":false,"error":"...",...}; vecgate writes
	 * compact JSON, but allow blanks around the colon */
	pos = strstr(reply, "\"ok\"");
	if (pos)
	{
		pos += strlen("\"ok\"");
		pos += strspn(pos, " \t");
		if (*pos == ':')
		{
			pos++;
			pos += strspn(pos, " \t");
			if (strneq(pos, "true", 4))
			{
				if (answer)
				{
					*answer = reply;
				}
				else
				{
					free(reply);
				}
				return SUCCESS;
			}
		}
	}
	pos = strstr(reply, "\"error\"");
	if (pos && (pos = strchr(pos + strlen("\"error\""), '"')))
	{
		/* the string up to its closing quote (escapes kept as they are) */
		for (end = ++pos; *end && *end != '"'; end++)
		{
			if (*end == '\\' && end[1])
			{
				end++;
			}
		}
		*error = strndup(pos, end - pos);
	}
	else
	{
		end = strchr(reply, '\n');
		*error = strndup(reply, end ? end - reply : strlen(reply));
	}
	free(reply);
	return FAILED;

io_error:
	set_error(error, "talking to %s: %s", this->socket,
			  n == 0 ? "connection closed" : strerror(errno));
failed:
	close(fd);
	free(reply);
	return FAILED;
}

/** the unsigned number after the first `key` in `text` (`key` with its quotes
 * and colon, so "bytes": is not found in "hard_bytes":) */
static bool number_after(char *text, const char *key, uint64_t *value)
{
	char *pos = strstr(text, key), *end;

	if (!pos)
	{
		return FALSE;
	}
	pos += strlen(key);
	errno = 0;
	*value = strtoull(pos, &end, 10);
	return end != pos && errno == 0;
}

/** the same, with `key` found before `end` (NULL: anywhere) */
static bool number_in(char *text, char *end, const char *key, uint64_t *value)
{
	char *pos = strstr(text, key);

	return pos && (!end || pos < end) && number_after(pos, key, value);
}

/** whether `text` has `what` before `end` (NULL: anywhere) */
static bool found_in(char *text, char *end, const char *what)
{
	char *pos = strstr(text, what);

	return pos && (!end || pos < end);
}

/** delete one of our SAs in vecgate */
static status_t del_index(private_kernel_vecgate_ipsec_t *this, int64_t index)
{
	char json[128], *error;
	status_t status;

	snprintf(json, sizeof(json), "{\"op\":\"ipsec_sa_del\",\"index\":%lld}",
			 (long long)index);
	status = request(this, json, &error, NULL);
	if (status != SUCCESS)
	{
		DBG1(DBG_KNL, "vecgate: deleting SA index %lld failed: %s",
			 (long long)index, error ?: "?");
		free(error);
	}
	return status;
}

/* ------------------------------------------------------------------------ */
/* our table */

static void entry_destroy(sa_entry_t *entry)
{
	entry->dst->destroy(entry->dst);
	free(entry);
}

/** find an entry by SPI and destination address; call with mutex held */
static sa_entry_t *find_entry(private_kernel_vecgate_ipsec_t *this,
							  uint32_t spi, host_t *dst)
{
	enumerator_t *enumerator;
	sa_entry_t *entry, *found = NULL;

	enumerator = this->sas->create_enumerator(this->sas);
	while (enumerator->enumerate(enumerator, &entry))
	{
		if (entry->spi == spi && entry->dst->ip_equals(entry->dst, dst))
		{
			found = entry;
			break;
		}
	}
	enumerator->destroy(enumerator);
	return found;
}

/** lowest free index of our range, -1 if none; call with mutex held */
static int64_t free_index(private_kernel_vecgate_ipsec_t *this)
{
	uint32_t i;

	for (i = 0; i < this->indexes; i++)
	{
		if (this->index_state[i] == INDEX_FREE)
		{
			return (int64_t)this->first_index + i;
		}
	}
	return -1;
}

static void set_index_state(private_kernel_vecgate_ipsec_t *this,
							int64_t index, index_state_t state)
{
	this->index_state[index - this->first_index] = state;
}

/** one of our installed SAs by id or by index (id 0: by index); call with
 * mutex held */
static sa_entry_t *find_installed(private_kernel_vecgate_ipsec_t *this,
								  u_int id, int64_t index)
{
	enumerator_t *enumerator;
	sa_entry_t *entry, *found = NULL;

	enumerator = this->sas->create_enumerator(this->sas);
	while (enumerator->enumerate(enumerator, &entry))
	{
		if (entry->index >= 0 &&
			(id ? entry->id == id : entry->index == index))
		{
			found = entry;
			break;
		}
	}
	enumerator->destroy(enumerator);
	return found;
}

static bool has_volume_limits(sa_entry_t *entry)
{
	return entry->rekey_bytes || entry->life_bytes ||
		   entry->rekey_packets || entry->life_packets;
}

/* ------------------------------------------------------------------------ */
/* lifetimes: charon learns from its kernel backend when an SA's time, bytes
 * or packets run out (soft: it rekeys the CHILD_SA; hard: it deletes it). As
 * libipsec does, time limits are jobs of ours; byte and packet limits vecgate
 * enforces, and we poll its counts to report them. */

/** an expire to report once the mutex is released (charon may call back) */
typedef struct {
	uint32_t spi;
	host_t *dst;
	bool hard;
} expire_t;

static anchor_t *anchor_get(anchor_t *anchor)
{
	ref_get(&anchor->refs);
	return anchor;
}

static void anchor_put(anchor_t *anchor)
{
	if (ref_put(&anchor->refs))
	{
		anchor->lock->destroy(anchor->lock);
		free(anchor);
	}
}

/**
 * An SA reached a limit; call with mutex held. A hard one ends the SA here
 * and now, as in the kernel and libipsec: removed from vecgate and from our
 * table, so nothing is left if charon has no CHILD_SA for it any more (its
 * del_sa, if it comes, finds nothing). Soft is reported once.
 */
static void expire_entry(private_kernel_vecgate_ipsec_t *this,
						 sa_entry_t *entry, bool hard, linked_list_t *events)
{
	expire_t *event;

	if (!hard && entry->soft_sent)
	{
		return;
	}
	INIT(event,
		.spi = entry->spi,
		.dst = entry->dst->clone(entry->dst),
		.hard = hard,
	);
	events->insert_last(events, event);
	if (!hard)
	{
		entry->soft_sent = TRUE;
		return;
	}
	this->sas->remove(this->sas, entry, NULL);
	/* freed even if vecgate fails, as in del_sa */
	del_index(this, entry->index);
	set_index_state(this, entry->index, INDEX_FREE);
	entry_destroy(entry);
}

/** tell charon, without our locks, and free the list */
static void raise_expires(linked_list_t *events)
{
	expire_t *event;

	while (events->remove_first(events, (void**)&event) == SUCCESS)
	{
		DBG1(DBG_KNL, "vecgate: SA with SPI %.8x to %H reached its %s lifetime",
			 ntohl(event->spi), event->dst, event->hard ? "hard" : "soft");
		charon->kernel->expire(charon->kernel, IPPROTO_ESP, event->spi,
							   event->dst, event->hard);
		event->dst->destroy(event->dst);
		free(event);
	}
	events->destroy(events);
}

/** a time limit of one SA */
typedef struct {
	anchor_t *anchor;
	u_int id;
	bool hard;
} time_job_t;

static void time_job_destroy(time_job_t *job)
{
	anchor_put(job->anchor);
	free(job);
}

static job_requeue_t time_expired(time_job_t *job)
{
	private_kernel_vecgate_ipsec_t *this;
	linked_list_t *events = linked_list_create();
	sa_entry_t *entry;

	job->anchor->lock->read_lock(job->anchor->lock);
	this = job->anchor->backend;
	if (this)
	{
		this->mutex->lock(this->mutex);
		entry = find_installed(this, job->id, -1);
		if (entry)
		{
			expire_entry(this, entry, job->hard, events);
		}
		this->mutex->unlock(this->mutex);
	}
	job->anchor->lock->unlock(job->anchor->lock);
	raise_expires(events);
	return JOB_REQUEUE_NONE;
}

/** call with mutex held */
static void schedule_time(private_kernel_vecgate_ipsec_t *this, u_int id,
						  uint64_t seconds, bool hard)
{
	time_job_t *job;

	INIT(job,
		.anchor = anchor_get(this->anchor),
		.id = id,
		.hard = hard,
	);
	lib->scheduler->schedule_job(lib->scheduler, (job_t*)callback_job_create(
						(callback_job_cb_t)time_expired, job,
						(callback_job_cleanup_t)time_job_destroy, NULL),
						min(seconds, UINT32_MAX));
}

/** a count reached a limit (0: none), the kernel's way */
static bool reached(uint64_t count, uint64_t limit)
{
	return limit && count >= limit;
}

/** one past the closing brace of the JSON object opening at `start` (NULL if
 * it does not close); braces in strings do not count */
static char *object_end(char *start)
{
	bool quoted = FALSE;
	int depth = 0;
	char *p;

	for (p = start; *p; p++)
	{
		if (quoted)
		{
			if (*p == '\\' && p[1])
			{
				p++;
			}
			else if (*p == '"')
			{
				quoted = FALSE;
			}
			continue;
		}
		switch (*p)
		{
			case '"':
				quoted = TRUE;
				break;
			case '{':
				depth++;
				break;
			case '}':
				if (--depth == 0)
				{
					return p + 1;
				}
				break;
			default:
				break;
		}
	}
	return NULL;
}

/** compare each of our SAs with a volume limit to vecgate's counts; call with
 * mutex held */
static void check_counts(private_kernel_vecgate_ipsec_t *this,
						 linked_list_t *events)
{
	char *answer = NULL, *error, *pos, *next;
	uint64_t index, packets, bytes;
	sa_entry_t *entry;

	/* one request for all: the "sas" array has an object per SA, with its
	 * "index", "packets", "bytes" (inbound: all workers summed) and "expired",
	 * in no order we rely on: each object is cut out whole */
	if (request(this, "{\"op\":\"show_ipsec_sa\"}", &error, &answer) != SUCCESS)
	{
		DBG1(DBG_KNL, "vecgate: reading SA counts for byte and packet "
			 "lifetimes failed: %s", error ?: "unknown error");
		free(error);
		return;
	}
	pos = strstr(answer, "\"sas\":[");
	for (pos = pos ? pos + strlen("\"sas\":[") : NULL;
		 pos && *pos == '{' && (next = object_end(pos));
		 pos = *next == ',' ? next + 1 : NULL)
	{
		if (number_in(pos, next, "\"index\":", &index) &&
			number_in(pos, next, "\"packets\":", &packets) &&
			number_in(pos, next, "\"bytes\":", &bytes) &&
			(entry = find_installed(this, 0, index)) &&
			has_volume_limits(entry))
		{
			/* "expired": vecgate refused a packet for the hard limit. An
			 * SA's byte count may stop short of that limit (the
			 * packet that would pass it is refused uncounted). */
			if (found_in(pos, next, "\"expired\":true") ||
				reached(packets, entry->life_packets) ||
				reached(bytes, entry->life_bytes))
			{
				expire_entry(this, entry, TRUE, events);
			}
			else if (reached(packets, entry->rekey_packets) ||
					 reached(bytes, entry->rekey_bytes))
			{
				expire_entry(this, entry, FALSE, events);
			}
		}
	}
	free(answer);
}

/** polls while one of our SAs has a byte or packet limit */
static job_requeue_t poll_counts(anchor_t *anchor)
{
	private_kernel_vecgate_ipsec_t *this;
	linked_list_t *events = linked_list_create();
	enumerator_t *enumerator;
	sa_entry_t *entry;
	bool again = FALSE;

	anchor->lock->read_lock(anchor->lock);
	this = anchor->backend;
	if (this)
	{
		this->mutex->lock(this->mutex);
		enumerator = this->sas->create_enumerator(this->sas);
		while (!again && enumerator->enumerate(enumerator, &entry))
		{
			again = entry->index >= 0 && has_volume_limits(entry);
		}
		enumerator->destroy(enumerator);
		if (again)
		{
			check_counts(this, events);
		}
		/* add_sa starts a new job once this one stops */
		this->polling = again;
		this->mutex->unlock(this->mutex);
	}
	anchor->lock->unlock(anchor->lock);
	raise_expires(events);
	return again ? JOB_RESCHEDULE_MS(POLL_MS) : JOB_REQUEUE_NONE;
}

/** call with mutex held */
static void start_polling(private_kernel_vecgate_ipsec_t *this)
{
	if (this->polling)
	{
		return;
	}
	this->polling = TRUE;
	lib->scheduler->schedule_job_ms(lib->scheduler, (job_t*)callback_job_create(
						(callback_job_cb_t)poll_counts, anchor_get(this->anchor),
						(callback_job_cleanup_t)anchor_put, NULL), POLL_MS);
}

/* ------------------------------------------------------------------------ */
/* building the add request */

/** vecgate's name for charon's algorithms, NULL if vecgate has none */
static char *algorithm_name(kernel_ipsec_add_sa_t *data)
{
	switch (data->enc_alg)
	{
		case ENCR_AES_GCM_ICV16:
			if (data->int_alg != AUTH_UNDEFINED)
			{
				return NULL;
			}
			/* the chunk is key || 4-byte salt */
			switch (data->enc_key.len)
			{
				case 16 + 4:
					return "aes-gcm-128";
				case 32 + 4:
					return "aes-gcm-256";
			}
			return NULL;
		case ENCR_CHACHA20_POLY1305:
			if (data->int_alg != AUTH_UNDEFINED || data->enc_key.len != 32 + 4)
			{
				return NULL;
			}
			return "chacha20-poly1305";
		case ENCR_AES_CBC:
			if (data->int_alg != AUTH_HMAC_SHA2_256_128 ||
				(data->enc_key.len != 16 && data->enc_key.len != 32))
			{
				return NULL;
			}
			return "aes-cbc-sha256";
		case ENCR_NULL:
			switch (data->int_alg)
			{
				case AUTH_HMAC_SHA2_256_128:
					return "null-sha256";
				case AUTH_UNDEFINED:
					return "null";
			}
			return NULL;
	}
	return NULL;
}

/**
 * Check the peer's traffic selectors and, if b is given, append them as the
 * "routes" array. FALSE if one of them is not exactly a prefix with any
 * protocol and port: a route cannot express it.
 */
static bool peer_routes(linked_list_t *peer_ts, jbuf_t *b)
{
	enumerator_t *enumerator;
	traffic_selector_t *ts;
	host_t *net = NULL;
	uint8_t mask;
	char addr[INET6_ADDRSTRLEN];
	bool ok = TRUE, first = TRUE;

	if (b)
	{
		jb_add(b, ",\"routes\":[");
	}
	enumerator = peer_ts->create_enumerator(peer_ts);
	while (enumerator->enumerate(enumerator, &ts))
	{
		if (ts->get_protocol(ts) != 0 || ts->get_from_port(ts) != 0 ||
			ts->get_to_port(ts) != 0xffff)
		{
			DBG1(DBG_KNL, "vecgate: traffic selector %R limits protocol or "
				 "ports, but vecgate SAs are route-based", ts);
			ok = FALSE;
			break;
		}
		if (!ts->to_subnet(ts, &net, &mask))
		{
			DBG1(DBG_KNL, "vecgate: traffic selector %R is not a single "
				 "subnet, so it cannot be a route", ts);
			DESTROY_IF(net);
			ok = FALSE;
			break;
		}
		if (!addr_str(net, addr, sizeof(addr)))
		{
			net->destroy(net);
			ok = FALSE;
			break;
		}
		if (b)
		{
			jb_add(b, "%s\"%s/%u\"", first ? "" : ",", addr, mask);
		}
		first = FALSE;
		net->destroy(net);
		net = NULL;
	}
	enumerator->destroy(enumerator);
	if (b)
	{
		jb_add(b, "]");
	}
	return ok;
}

METHOD(kernel_ipsec_t, get_features, kernel_feature_t,
	private_kernel_vecgate_ipsec_t *this)
{
	return 0;
}

METHOD(kernel_ipsec_t, get_spi, status_t,
	private_kernel_vecgate_ipsec_t *this, host_t *src, host_t *dst,
	uint8_t protocol, uint32_t *spi)
{
	sa_entry_t *entry;
	uint32_t value;
	int tries;

	if (protocol != IPPROTO_ESP)
	{
		return NOT_SUPPORTED;
	}
	this->mutex->lock(this->mutex);
	for (tries = 0; tries < 100; tries++)
	{
		if (!this->rng->get_bytes(this->rng, sizeof(value), (uint8_t*)&value))
		{
			break;
		}
		value = htonl(SPI_BASE | (value & SPI_MASK));
		if (!find_entry(this, value, dst))
		{
			/* reserve it until charon adds or deletes the SA */
			INIT(entry,
				.spi = value,
				.dst = dst->clone(dst),
				.index = -1,
			);
			this->sas->insert_last(this->sas, entry);
			this->mutex->unlock(this->mutex);
			*spi = value;
			return SUCCESS;
		}
	}
	this->mutex->unlock(this->mutex);
	DBG1(DBG_KNL, "vecgate: unable to allocate an SPI");
	return FAILED;
}

METHOD(kernel_ipsec_t, get_cpi, status_t,
	private_kernel_vecgate_ipsec_t *this, host_t *src, host_t *dst,
	uint16_t *cpi)
{
	return NOT_SUPPORTED;
}

METHOD(kernel_ipsec_t, add_sa, status_t,
	private_kernel_vecgate_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_add_sa_t *data)
{
	char local[INET6_ADDRSTRLEN], remote[INET6_ADDRSTRLEN], *alg, *error;
	lifetime_cfg_t none = {}, *lft = data->lifetime ?: &none;
	host_t *us, *peer;
	jbuf_t body = {}, req = {};
	sa_entry_t *entry;
	status_t status = FAILED;
	int64_t index;

	if (id->proto != IPPROTO_ESP || data->ipcomp != IPCOMP_NONE)
	{
		DBG1(DBG_KNL, "vecgate: only ESP SAs are supported (no AH, no IPComp)");
		return NOT_SUPPORTED;
	}
	if (data->mode != MODE_TUNNEL)
	{
		/* a transport-mode SA in vecgate protects only what SPD policies
		 * select, and this plugin installs routes, not policies: refused
		 * rather than installed to protect nothing */
		DBG1(DBG_KNL, "vecgate: %N mode is not supported (tunnel mode only)",
			 ipsec_mode_names, data->mode);
		return NOT_SUPPORTED;
	}
	alg = algorithm_name(data);
	if (!alg)
	{
		DBG1(DBG_KNL, "vecgate: algorithms %N (%u-byte key) / %N are not "
			 "supported", encryption_algorithm_names, data->enc_alg,
			 (u_int)data->enc_key.len, integrity_algorithm_names,
			 data->int_alg);
		return NOT_SUPPORTED;
	}
	/* inbound: the SA goes from the peer (src) to us (dst); outbound the
	 * other way round. vecgate wants our endpoint and port first. */
	us = data->inbound ? id->dst : id->src;
	peer = data->inbound ? id->src : id->dst;
	if (!addr_str(us, local, sizeof(local)) ||
		!addr_str(peer, remote, sizeof(remote)))
	{
		return NOT_SUPPORTED;
	}

	/* everything but the index, which we may have to try more than once */
	jb_add(&body, "\"spi\":%u,\"direction\":\"%s\",\"mode\":\"%s\","
		   "\"algorithm\":\"%s\",\"enc_key\":\"", ntohl(id->spi),
		   data->inbound ? "inbound" : "outbound",
		   "tunnel", alg);
	jb_hex(&body, data->enc_key);
	jb_add(&body, "\",\"integ_key\":\"");
	jb_hex(&body, data->int_key);
	jb_add(&body, "\",\"local\":\"%s\",\"remote\":\"%s\",\"udp_encap\":%s",
		   local, remote, data->encap ? "true" : "false");
	if (data->encap)
	{	/* the ports of the SA's packets, as its addresses: an inbound SA's
		 * destination port is ours (vecgate takes ESP in UDP there), its source
		 * the peer's (a NAT's, which need not be 4500) */
		jb_add(&body, ",\"udp_src_port\":%u,\"udp_dst_port\":%u",
			   id->src->get_port(id->src), id->dst->get_port(id->dst));
	}
	jb_add(&body, ",\"esn\":%s,\"anti_replay\":%s",
		   data->esn ? "true" : "false",
		   data->replay_window > 0 ? "true" : "false");
	/* the peer's selectors are the destination of an outbound SA and the
	 * source of an inbound one; refusing them already on the inbound SA
	 * (installed first) saves adding an SA that is deleted right after */
	if (!peer_routes(data->inbound ? data->src_ts : data->dst_ts,
					 data->inbound ? NULL : &body))
	{
		jb_free(&body);
		return NOT_SUPPORTED;
	}
	if (data->inbound)
	{
		jb_add(&body, ",\"urpf\":\"%s\"", this->urpf);
	}
	/* vecgate counts and enforces byte and packet limits itself (past a hard
	 * one the SA drops packets); its soft limit may not be above the hard */
	jb_add(&body, ",\"lifetime\":{\"soft_packets\":%llu,\"hard_packets\":%llu,"
		   "\"soft_bytes\":%llu,\"hard_bytes\":%llu}",
		   (unsigned long long)(lft->packets.life ?
				min(lft->packets.rekey, lft->packets.life) : lft->packets.rekey),
		   (unsigned long long)lft->packets.life,
		   (unsigned long long)(lft->bytes.life ?
				min(lft->bytes.rekey, lft->bytes.life) : lft->bytes.rekey),
		   (unsigned long long)lft->bytes.life);
	jb_add(&body, "}");
	if (body.failed)
	{
		jb_free(&body);
		return FAILED;
	}

	this->mutex->lock(this->mutex);
	entry = find_entry(this, id->spi, id->dst);
	if (entry && entry->index >= 0)
	{
		DBG1(DBG_KNL, "vecgate: SA with SPI %.8x to %H already installed",
			 ntohl(id->spi), id->dst);
		goto out;
	}
	while ((index = free_index(this)) >= 0)
	{
		jb_free(&req);
		jb_add(&req, "{\"op\":\"ipsec_sa_add\",\"index\":%lld,%s",
			   (long long)index, body.buf);
		if (req.failed)
		{
			goto out;
		}
		status = request(this, req.buf, &error, NULL);
		if (status == SUCCESS)
		{
			break;
		}
		if (error && strstr(error, "index"))
		{	/* someone else's SA has it: skip it from now on */
			DBG1(DBG_KNL, "vecgate: SA index %lld is taken (%s), trying the "
				 "next one", (long long)index, error);
			set_index_state(this, index, INDEX_TAKEN);
			free(error);
			continue;
		}
		DBG1(DBG_KNL, "vecgate: adding %s SA with SPI %.8x failed: %s",
			 data->inbound ? "inbound" : "outbound", ntohl(id->spi),
			 error ?: "?");
		free(error);
		goto out;
	}
	if (index < 0)
	{
		DBG1(DBG_KNL, "vecgate: all %u SA indexes from %u on are in use",
			 this->indexes, this->first_index);
		status = FAILED;
		goto out;
	}

	set_index_state(this, index, INDEX_OURS);
	if (!entry)
	{
		INIT(entry,
			.spi = id->spi,
			.dst = id->dst->clone(id->dst),
		);
		this->sas->insert_last(this->sas, entry);
	}
	entry->index = index;
	entry->id = ++this->last_id ?: ++this->last_id;
	entry->inbound = data->inbound;
	entry->rekey_bytes = lft->bytes.rekey;
	entry->life_bytes = lft->bytes.life;
	entry->rekey_packets = lft->packets.rekey;
	entry->life_packets = lft->packets.life;
	entry->soft_sent = FALSE;
	/* as libipsec: no soft expire at or after the hard one */
	if (lft->time.rekey && (!lft->time.life || lft->time.rekey < lft->time.life))
	{
		schedule_time(this, entry->id, lft->time.rekey, FALSE);
	}
	if (lft->time.life)
	{
		schedule_time(this, entry->id, lft->time.life, TRUE);
	}
	if (has_volume_limits(entry))
	{
		start_polling(this);
	}
	DBG2(DBG_KNL, "vecgate: added %s %s SA with SPI %.8x as index %lld",
		 data->inbound ? "inbound" : "outbound", alg, ntohl(id->spi),
		 (long long)index);

out:
	this->mutex->unlock(this->mutex);
	jb_free(&req);
	jb_free(&body);
	return status;
}

/* The SA's endpoints changed: the peer's NAT mapping (seen on an authenticated
 * IKE message from a new address or port) or MOBIKE. vecgate moves the SA in
 * place (ipsec_sa_update): keys, SPI, sequence numbers, replay window, counts,
 * index and routes stay. Our entry is then known by its new destination. */
METHOD(kernel_ipsec_t, update_sa, status_t,
	private_kernel_vecgate_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_update_sa_t *data)
{
	char local[INET6_ADDRSTRLEN], remote[INET6_ADDRSTRLEN], *error;
	host_t *us, *peer;
	jbuf_t req = {};
	sa_entry_t *entry;
	status_t status = FAILED;

	if (id->proto != IPPROTO_ESP || data->cpi)
	{
		return NOT_SUPPORTED;
	}
	this->mutex->lock(this->mutex);
	entry = find_entry(this, id->spi, id->dst);
	if (!entry || entry->index < 0)
	{
		this->mutex->unlock(this->mutex);
		DBG1(DBG_KNL, "vecgate: no SA with SPI %.8x to %H to update",
			 ntohl(id->spi), id->dst);
		return NOT_FOUND;
	}
	/* as in add_sa: our endpoint is the destination of an inbound SA */
	us = entry->inbound ? data->new_dst : data->new_src;
	peer = entry->inbound ? data->new_src : data->new_dst;
	if (!addr_str(us, local, sizeof(local)) ||
		!addr_str(peer, remote, sizeof(remote)))
	{
		goto out;
	}
	jb_add(&req, "{\"op\":\"ipsec_sa_update\",\"index\":%lld,\"local\":\"%s\","
		   "\"remote\":\"%s\",\"udp_encap\":%s", (long long)entry->index,
		   local, remote, data->new_encap ? "true" : "false");
	if (data->new_encap)
	{	/* the ports of the SA's packets (see add_sa) */
		jb_add(&req, ",\"udp_src_port\":%u,\"udp_dst_port\":%u",
			   data->new_src->get_port(data->new_src),
			   data->new_dst->get_port(data->new_dst));
	}
	jb_add(&req, "}");
	if (req.failed)
	{
		goto out;
	}
	status = request(this, req.buf, &error, NULL);
	if (status != SUCCESS)
	{
		DBG1(DBG_KNL, "vecgate: updating SA with SPI %.8x (index %lld) failed: "
			 "%s", ntohl(id->spi), (long long)entry->index, error ?: "?");
		free(error);
		goto out;
	}
	entry->dst->destroy(entry->dst);
	entry->dst = data->new_dst->clone(data->new_dst);
	DBG1(DBG_KNL, "vecgate: updated %s SA with SPI %.8x (index %lld): %#H "
		 "-> %#H%s", entry->inbound ? "inbound" : "outbound", ntohl(id->spi),
		 (long long)entry->index, data->new_src, data->new_dst,
		 data->new_encap ? " in UDP" : "");

out:
	this->mutex->unlock(this->mutex);
	jb_free(&req);
	return status;
}

/* What an SA carried (vecgate counts payload bytes, all workers summed). vecgate
 * keeps no time of last use: the time returned is when a query first saw the byte
 * count grow, which is what charon compares for DPD and inactivity. */
METHOD(kernel_ipsec_t, query_sa, status_t,
	private_kernel_vecgate_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_query_sa_t *data, uint64_t *bytes, uint64_t *packets,
	time_t *time)
{
	sa_entry_t *entry;
	char json[96], *error, *answer = NULL;
	status_t status;

	this->mutex->lock(this->mutex);
	entry = find_entry(this, id->spi, id->dst);
	if (!entry || entry->index < 0)
	{
		this->mutex->unlock(this->mutex);
		return NOT_FOUND;
	}
	snprintf(json, sizeof(json), "{\"op\":\"show_ipsec_sa\",\"index\":%lld}",
			 (long long)entry->index);
	status = request(this, json, &error, &answer);
	if (status != SUCCESS)
	{
		DBG1(DBG_KNL, "vecgate: querying SA with SPI %.8x (index %lld) failed: %s",
			 ntohl(id->spi), (long long)entry->index, error ?: "unknown error");
		free(error);
	}
	else if (!number_after(answer, "\"bytes\":", bytes) ||
			 !number_after(answer, "\"packets\":", packets))
	{
		DBG1(DBG_KNL, "vecgate: no counts in the answer about SA index %lld",
			 (long long)entry->index);
		status = FAILED;
	}
	else
	{
		if (*bytes != entry->last_bytes)
		{
			entry->last_bytes = *bytes;
			entry->last_use = time_monotonic(NULL);
		}
		if (time)
		{
			*time = entry->last_use;
		}
	}
	this->mutex->unlock(this->mutex);
	free(answer);
	return status;
}

METHOD(kernel_ipsec_t, del_sa, status_t,
	private_kernel_vecgate_ipsec_t *this, kernel_ipsec_sa_id_t *id,
	kernel_ipsec_del_sa_t *data)
{
	sa_entry_t *entry;
	status_t status = SUCCESS;

	this->mutex->lock(this->mutex);
	entry = find_entry(this, id->spi, id->dst);
	if (!entry)
	{
		this->mutex->unlock(this->mutex);
		return NOT_FOUND;
	}
	/* forget it even if vecgate fails: if the SA is still there, its index
	 * is found taken on the next add and skipped */
	this->sas->remove(this->sas, entry, NULL);
	if (entry->index >= 0)
	{
		status = del_index(this, entry->index);
		set_index_state(this, entry->index, INDEX_FREE);
		DBG2(DBG_KNL, "vecgate: deleted SA with SPI %.8x, index %lld",
			 ntohl(id->spi), (long long)entry->index);
	}
	this->mutex->unlock(this->mutex);
	entry_destroy(entry);
	return status;
}

METHOD(kernel_ipsec_t, flush_sas, status_t,
	private_kernel_vecgate_ipsec_t *this)
{
	sa_entry_t *entry;
	status_t status = SUCCESS;

	this->mutex->lock(this->mutex);
	while (this->sas->remove_first(this->sas, (void**)&entry) == SUCCESS)
	{
		if (entry->index >= 0)
		{
			if (del_index(this, entry->index) != SUCCESS)
			{
				status = FAILED;
			}
			set_index_state(this, entry->index, INDEX_FREE);
		}
		entry_destroy(entry);
	}
	this->mutex->unlock(this->mutex);
	return status;
}

/* Policies: vecgate's SAs are route-based (routes come with the outbound SA),
 * so there is nothing to install. */

METHOD(kernel_ipsec_t, add_policy, status_t,
	private_kernel_vecgate_ipsec_t *this, kernel_ipsec_policy_id_t *id,
	kernel_ipsec_manage_policy_t *data)
{
	return SUCCESS;
}

METHOD(kernel_ipsec_t, query_policy, status_t,
	private_kernel_vecgate_ipsec_t *this, kernel_ipsec_policy_id_t *id,
	kernel_ipsec_query_policy_t *data, time_t *use_time)
{
	return NOT_SUPPORTED;
}

METHOD(kernel_ipsec_t, del_policy, status_t,
	private_kernel_vecgate_ipsec_t *this, kernel_ipsec_policy_id_t *id,
	kernel_ipsec_manage_policy_t *data)
{
	return SUCCESS;
}

METHOD(kernel_ipsec_t, flush_policies, status_t,
	private_kernel_vecgate_ipsec_t *this)
{
	return SUCCESS;
}

/* IKE traffic stays on the host's own sockets; vecgate's dataplane does ESP,
 * so the kernel needs neither a bypass policy nor UDP decapsulation. */

METHOD(kernel_ipsec_t, bypass_socket, bool,
	private_kernel_vecgate_ipsec_t *this, int fd, int family)
{
	return TRUE;
}

METHOD(kernel_ipsec_t, enable_udp_decap, bool,
	private_kernel_vecgate_ipsec_t *this, int fd, int family, uint16_t port)
{
	return TRUE;
}

/* The index range is ours: SAs in it that an earlier charon left behind (it
 * stopped without deleting them, or crashed) protect nothing charon knows of, and
 * their routes would outlive them. Removed at start; if vecgate cannot be asked
 * now, each is found taken when its index comes up, and stays. */
static void clear_leftovers(private_kernel_vecgate_ipsec_t *this)
{
	char *answer = NULL, *error, *pos;
	uint64_t index;
	u_int removed = 0;

	if (request(this, "{\"op\":\"show_ipsec_sa\"}", &error, &answer) != SUCCESS)
	{
		DBG1(DBG_KNL, "vecgate: cannot list SAs at start (%s): SAs an earlier "
			 "run left in our index range stay", error ?: "unknown error");
		free(error);
		return;
	}
	for (pos = answer; (pos = strstr(pos, "\"index\":")); pos++)
	{
		if (number_after(pos, "\"index\":", &index) &&
			index >= this->first_index &&
			index - this->first_index < this->indexes &&
			del_index(this, index) == SUCCESS)
		{
			removed++;
		}
	}
	free(answer);
	if (removed)
	{
		DBG1(DBG_KNL, "vecgate: removed %u SAs an earlier run left in our "
			 "index range", removed);
	}
}

METHOD(kernel_ipsec_t, destroy, void,
	private_kernel_vecgate_ipsec_t *this)
{
	/* jobs still pending find no backend from now on (charon flushes its
	 * scheduler before it unloads plugins, but jobs may not rely on that) */
	if (this->anchor)
	{
		this->anchor->lock->write_lock(this->anchor->lock);
		this->anchor->backend = NULL;
		this->anchor->lock->unlock(this->anchor->lock);
		anchor_put(this->anchor);
	}
	/* SAs stay in vecgate: charon deletes each CHILD_SA before this */
	this->sas->destroy_function(this->sas, (void*)entry_destroy);
	DESTROY_IF(this->rng);
	this->mutex->destroy(this->mutex);
	free(this->index_state);
	free(this->socket);
	free(this->urpf);
	free(this);
}

/*
 * See header
 */
kernel_vecgate_ipsec_t *kernel_vecgate_ipsec_create()
{
	private_kernel_vecgate_ipsec_t *this;
	char *path, *urpf;
	int first, count;

	path = lib->settings->get_str(lib->settings,
						"%s.plugins.kernel-vecgate.socket", NULL, lib->ns);
	first = lib->settings->get_int(lib->settings,
						"%s.plugins.kernel-vecgate.first_index", 1000, lib->ns);
	count = lib->settings->get_int(lib->settings,
						"%s.plugins.kernel-vecgate.indexes", 1000, lib->ns);
	urpf = lib->settings->get_str(lib->settings,
						"%s.plugins.kernel-vecgate.urpf", "strict", lib->ns);

	/* refuse to start half-configured: charon would otherwise fall back to
	 * the next kernel-ipsec backend (XFRM) */
	if (!path || !*path)
	{
		DBG1(DBG_KNL, "vecgate: %s.plugins.kernel-vecgate.socket is not set",
			 lib->ns);
		return NULL;
	}
	if (first < 0 || count <= 0 || count > 1 << 20)
	{
		DBG1(DBG_KNL, "vecgate: invalid index range: first_index %d, "
			 "indexes %d", first, count);
		return NULL;
	}
	if (!streq(urpf, "strict") && !streq(urpf, "loose") && !streq(urpf, "off"))
	{
		DBG1(DBG_KNL, "vecgate: urpf must be strict, loose or off, not '%s'",
			 urpf);
		return NULL;
	}

	INIT(this,
		.public = {
			.interface = {
				.get_features = _get_features,
				.get_spi = _get_spi,
				.get_cpi = _get_cpi,
				.add_sa = _add_sa,
				.update_sa = _update_sa,
				.query_sa = _query_sa,
				.del_sa = _del_sa,
				.flush_sas = _flush_sas,
				.add_policy = _add_policy,
				.query_policy = _query_policy,
				.del_policy = _del_policy,
				.flush_policies = _flush_policies,
				.bypass_socket = _bypass_socket,
				.enable_udp_decap = _enable_udp_decap,
				.destroy = _destroy,
			},
		},
		.mutex = mutex_create(MUTEX_TYPE_DEFAULT),
		.socket = strdup(path),
		.first_index = first,
		.indexes = count,
		.index_state = calloc(count, 1),
		.urpf = strdup(urpf),
		.sas = linked_list_create(),
		.rng = lib->crypto->create_rng(lib->crypto, RNG_WEAK),
	);
	INIT(this->anchor,
		.backend = this,
		.lock = rwlock_create(RWLOCK_TYPE_DEFAULT),
		.refs = 1,
	);
	if (!this->rng)
	{
		DBG1(DBG_KNL, "vecgate: no RNG for SPIs");
		destroy(this);
		return NULL;
	}
	DBG1(DBG_KNL, "vecgate: SAs go to %s, indexes %u..%u", this->socket,
		 this->first_index, this->first_index + this->indexes - 1);
	clear_leftovers(this);
	return &this->public;
}
