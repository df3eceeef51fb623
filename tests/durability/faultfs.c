/* faultfs: the durability tests' record of what each sync made durable.
 *
 * Loaded with LD_PRELOAD into a process that runs pylog. It does not change
 * what the process does; it watches every call that makes data durable and
 * journals, right after the call succeeded, what that call covered:
 *
 *   fsync(fd), fdatasync(fd)  regular file: a copy of the whole file, as it is
 *                             after the sync returned  -> "F" entry
 *                             directory: its entries (name, inode, type) -> "D"
 *   msync(addr, ..., MS_SYNC) the file behind that MAP_SHARED mapping -> "F"
 *   faultfs_synced(fd)        called by pylog's io_uring engine after a ring
 *                             fsync completed (libc never sees those) -> "F"
 *
 * The copy is taken after the sync, so it may include bytes written by other
 * threads while the sync ran; those may not be durable. The image builder
 * (harness.py) therefore never trusts a copy for data written after the sync
 * started: it only checks records acknowledged *after* the entry, which makes
 * the approximation safe for the invariants it checks (an acknowledged record
 * was written before the sync that acknowledged it).
 *
 * Environment: FAULTFS_JOURNAL (a directory for the journal; unset = the
 * layer is inert) and FAULTFS_ROOT (only files below this path are tracked).
 *
 * Journal: FAULTFS_JOURNAL/journal, one line per durable event, written with
 * one write(2) after the copy is complete, so a SIGKILL leaves whole lines:
 *     <seq> F <dev>:<ino>:<generation> <size> <copy file>
 *     <seq> D <dev>:<ino>:<generation> <entry count> <listing file>
 * faultfs_seq() returns the last sequence number journaled; the test program
 * logs it beside each acknowledgement. A process started on an existing
 * journal continues its numbering (a store closed cleanly, then reopened).
 *
 * A file's identity is dev:ino:generation (FS_IOC_GETVERSION; ext4 and XFS
 * give every new inode a fresh generation), so an inode number reused after
 * an unlink is a different file. Where the ioctl is missing the generation is
 * 0 and a reused number would share the dead file's identity.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char journal_dir[PATH_MAX];
static char root[PATH_MAX];
static size_t root_len;
static int journal_fd = -1;
static uint64_t seq;                    /* guarded by lock */

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);

/* MAP_SHARED file mappings below the root: msync needs the file behind one. */
struct mapping {
    char *addr;
    size_t len;
    int fd;                             /* our own descriptor of the file */
};
#define MAX_MAPPINGS 4096
static struct mapping maps[MAX_MAPPINGS];  /* guarded by lock */

static void setup(void)
{
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_msync = dlsym(RTLD_NEXT, "msync");
    real_mmap = dlsym(RTLD_NEXT, "mmap");
    real_munmap = dlsym(RTLD_NEXT, "munmap");
    real_mremap = dlsym(RTLD_NEXT, "mremap");
    const char *j = getenv("FAULTFS_JOURNAL"), *r = getenv("FAULTFS_ROOT");
    if (j == NULL || r == NULL || realpath(r, root) == NULL)
        return;
    snprintf(journal_dir, sizeof journal_dir, "%s", j);
    root_len = strlen(root);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/journal", journal_dir);
    /* A journal that exists belongs to an earlier process on the same files:
     * continue its numbering. */
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        unsigned long long n;
        char rest[PATH_MAX + 128];
        while (fscanf(f, "%llu %[^\n]\n", &n, rest) == 2)
            seq = n;
        fclose(f);
    }
    journal_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void die(const char *what)
{
    /* The journal would no longer be a faithful record: stop the process
     * rather than let a test pass on a partial journal. */
    fprintf(stderr, "faultfs: %s: %s\n", what, strerror(errno));
    abort();
}

/* The path of `fd` if it lies below the root, else 0. */
static int tracked_path(int fd, char *out, size_t len)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, len - 1);
    if (n <= 0)
        return 0;
    out[n] = 0;
    return strncmp(out, root, root_len) == 0 && (out[root_len] == '/' || out[root_len] == 0);
}

static unsigned long generation(int fd)
{
    long gen = 0;
    if (ioctl(fd, FS_IOC_GETVERSION, &gen) < 0)
        gen = 0;
    return (unsigned long)gen;
}

static unsigned long generation_at(int dir, const char *name)
{
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return 0;
    unsigned long gen = generation(fd);
    close(fd);
    return gen;
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("write");
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* Copies the file's data extents (holes stay holes) into `dst`. */
static void copy_file(int src, int dst, off_t size)
{
    char buf[1 << 16];
    off_t pos = 0;
    while (pos < size) {
        off_t data = lseek(src, pos, SEEK_DATA);
        if (data < 0)
            break;                      /* ENXIO: only a hole is left */
        off_t hole = lseek(src, data, SEEK_HOLE);
        if (hole < 0)
            hole = size;
        for (off_t at = data; at < hole;) {
            size_t want = (size_t)(hole - at) < sizeof buf ? (size_t)(hole - at) : sizeof buf;
            ssize_t n = pread(src, buf, want, at);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                die("pread");
            if (n == 0)
                break;
            if (pwrite(dst, buf, (size_t)n, at) != n)
                die("pwrite");
            at += n;
        }
        pos = hole;
    }
    if (ftruncate(dst, size) < 0)
        die("ftruncate");
}

/* Journals what a successful sync of `fd` made durable. Holds the lock so
 * that entries for one file are journaled in the order their copies were taken. */
static void record(int fd)
{
    char path[PATH_MAX], out[PATH_MAX + 64], line[PATH_MAX + 128];
    pthread_once(&once, setup);
    if (journal_fd < 0 || !tracked_path(fd, path, sizeof path))
        return;
    pthread_mutex_lock(&lock);
    /* A fresh description of the same inode: lseek must not move the caller's offset. */
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int src = open(link, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (src < 0 || fstat(src, &st) < 0) {
        /* The file was unlinked and its inode is gone: nothing is left to copy. */
        if (src >= 0)
            close(src);
        pthread_mutex_unlock(&lock);
        return;
    }
    uint64_t n = ++seq;
    snprintf(out, sizeof out, "%s/%08llu", journal_dir, (unsigned long long)n);
    int dst = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (dst < 0)
        die("open copy");
    int len;
    unsigned long gen = generation(src);
    if (S_ISDIR(st.st_mode)) {
        DIR *d = fdopendir(src);
        struct dirent *e;
        long count = 0;
        if (d == NULL)
            die("fdopendir");
        while ((e = readdir(d)) != NULL) {
            struct stat es;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (fstatat(dirfd(d), e->d_name, &es, AT_SYMLINK_NOFOLLOW) < 0)
                continue;               /* removed while we listed */
            len = snprintf(line, sizeof line, "%llu:%llu:%lu %c %s\n",
                           (unsigned long long)es.st_dev, (unsigned long long)es.st_ino,
                           generation_at(dirfd(d), e->d_name),
                           S_ISDIR(es.st_mode) ? 'd' : 'f', e->d_name);
            write_all(dst, line, (size_t)len);
            count++;
        }
        closedir(d);
        src = -1;
        len = snprintf(line, sizeof line, "%llu D %llu:%llu:%lu %ld %s\n", (unsigned long long)n,
                       (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, gen, count, out);
    } else {
        copy_file(src, dst, st.st_size);
        len = snprintf(line, sizeof line, "%llu F %llu:%llu:%lu %lld %s\n", (unsigned long long)n,
                       (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, gen,
                       (long long)st.st_size, out);
    }
    if (src >= 0)
        close(src);
    close(dst);
    write_all(journal_fd, line, (size_t)len);
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------ interposed calls */

int fsync(int fd)
{
    pthread_once(&once, setup);
    int rc = real_fsync(fd);
    if (rc == 0)
        record(fd);
    return rc;
}

int fdatasync(int fd)
{
    pthread_once(&once, setup);
    int rc = real_fdatasync(fd);
    if (rc == 0)
        record(fd);
    return rc;
}

void faultfs_synced(int fd)
{
    record(fd);
}

unsigned long long faultfs_seq(void)
{
    pthread_mutex_lock(&lock);
    unsigned long long n = seq;
    pthread_mutex_unlock(&lock);
    return n;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    pthread_once(&once, setup);
    void *m = real_mmap(addr, len, prot, flags, fd, off);
    char path[PATH_MAX];
    if (m != MAP_FAILED && fd >= 0 && (flags & MAP_SHARED) && journal_fd >= 0 &&
        tracked_path(fd, path, sizeof path)) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_MAPPINGS; i++) {
            if (maps[i].addr == NULL) {
                maps[i].addr = m;
                maps[i].len = len;
                maps[i].fd = open(link, O_RDONLY | O_CLOEXEC);
                break;
            }
        }
        pthread_mutex_unlock(&lock);
    }
    return m;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

static struct mapping *find_mapping(const void *addr)
{
    for (int i = 0; i < MAX_MAPPINGS; i++)
        if (maps[i].addr != NULL && (const char *)addr >= maps[i].addr &&
            (const char *)addr < maps[i].addr + maps[i].len)
            return &maps[i];
    return NULL;
}

int munmap(void *addr, size_t len)
{
    pthread_once(&once, setup);
    pthread_mutex_lock(&lock);
    struct mapping *m = find_mapping(addr);
    if (m != NULL && m->addr == addr) {
        if (m->fd >= 0)
            close(m->fd);
        m->addr = NULL;
    }
    pthread_mutex_unlock(&lock);
    return real_munmap(addr, len);
}

void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    pthread_once(&once, setup);
    void *fixed = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        fixed = va_arg(ap, void *);
        va_end(ap);
    }
    void *m = real_mremap(old, old_len, new_len, flags, fixed);
    if (m != MAP_FAILED) {
        pthread_mutex_lock(&lock);
        struct mapping *map = find_mapping(old);
        if (map != NULL && map->addr == old) {
            map->addr = m;
            map->len = new_len;
        }
        pthread_mutex_unlock(&lock);
    }
    return m;
}

int msync(void *addr, size_t len, int flags)
{
    pthread_once(&once, setup);
    int rc = real_msync(addr, len, flags);
    if (rc == 0 && (flags & MS_SYNC)) {
        pthread_mutex_lock(&lock);
        struct mapping *m = find_mapping(addr);
        int fd = m != NULL ? m->fd : -1;
        if (fd >= 0)
            record(fd);     /* recursive lock: `record` takes it again */
        pthread_mutex_unlock(&lock);
    }
    return rc;
}
