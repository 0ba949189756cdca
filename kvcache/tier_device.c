/* The device under a file tier's directory, as storage engineers describe
 * it (kvcache/tier_int.h): its name and model (sysfs), file system and
 * mount options (/proc/self/mountinfo), and what it did while the tier
 * lived (/proc/diskstats: bytes read and written by everyone on it, and the
 * share of the time it was busy). A device kvio cannot find (an overlay,
 * a network file system) is reported as unknown, never guessed. */
#include "kvcache/tier_int.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "kvio/clock.h"

/* The first line of a sysfs file, without its newline ("" when none). */
static void read_line(const char *path, char *text_p, size_t text_len)
{
    text_p[0] = '\0';
    FILE *file = fopen(path, "r");
    if (file == NULL)
        return;
    if (fgets(text_p, (int)text_len, file) == NULL)
        text_p[0] = '\0';
    fclose(file);
    size_t length = strlen(text_p);
    while (length > 0 && (text_p[length - 1] == '\n' || text_p[length - 1] == ' '))
        text_p[--length] = '\0';
}

/* The device's counters now: sectors read and written, ms busy. */
static bool sample(const tier_device_t *device, uint64_t counters_p[3])
{
    FILE *file = fopen("/proc/diskstats", "r");
    if (file == NULL)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof(line), file) != NULL) {
        unsigned major, minor;
        unsigned long long reads, merged_reads, sectors_read, read_ms, writes, merged_writes,
            sectors_written, write_ms, in_flight, busy_ms;
        char name[64];
        if (sscanf(line, "%u %u %63s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &major,
                   &minor, name, &reads, &merged_reads, &sectors_read, &read_ms, &writes,
                   &merged_writes, &sectors_written, &write_ms, &in_flight, &busy_ms) == 13 &&
            major == device->major && minor == device->minor) {
            counters_p[0] = sectors_read;
            counters_p[1] = sectors_written;
            counters_p[2] = busy_ms;
            found = true;
        }
    }
    fclose(file);
    return found;
}

/* The file system and mount options of the mount of the device. */
static void find_mount(tier_device_t *device)
{
    FILE *file = fopen("/proc/self/mountinfo", "r");
    if (file == NULL)
        return;
    char line[2048], wanted[32];
    snprintf(wanted, sizeof(wanted), "%u:%u", device->major, device->minor);
    while (fgets(line, sizeof(line), file) != NULL) {
        char id[32], root[1024], point[1024], options[256];
        unsigned mount_id, parent;
        if (sscanf(line, "%u %u %31s %1023s %1023s %255s", &mount_id, &parent, id, root, point,
                   options) != 6 || strcmp(id, wanted) != 0)
            continue;
        const char *dash = strstr(line, " - ");
        char fs[32] = "";
        if (dash != NULL && sscanf(dash + 3, "%31s", fs) == 1) {
            snprintf(device->fs, sizeof(device->fs), "%s", fs);
            snprintf(device->options, sizeof(device->options), "%s", options);
            break;
        }
    }
    fclose(file);
}

void tier_device_open(tier_device_t *device, const char *dir)
{
    memset(device, 0, sizeof(*device));
    struct stat info;
    if (stat(dir, &info) != 0)
        return;
    device->major = major(info.st_dev);
    device->minor = minor(info.st_dev);
    char path[256], link[512];
    snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/uevent", device->major, device->minor);
    FILE *uevent = fopen(path, "r");
    if (uevent != NULL) {
        char line[256];
        while (fgets(line, sizeof(line), uevent) != NULL)
            if (sscanf(line, "DEVNAME=%63s", device->name) == 1)
                break;
        fclose(uevent);
    }
    /* A partition's model is its disk's. */
    snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/device/model", device->major,
             device->minor);
    read_line(path, device->model, sizeof(device->model));
    if (device->model[0] == '\0') {
        snprintf(link, sizeof(link), "/sys/dev/block/%u:%u/../device/model", device->major,
                 device->minor);
        read_line(link, device->model, sizeof(device->model));
    }
    find_mount(device);
    device->known = sample(device, device->start);
    device->start_ns = kvio_time_ns();
}

void tier_device_report(const tier_device_t *device, json_t *object)
{
    json_t *about = json_object();
    if (about == NULL)
        return;
    json_object_set_new(about, "name", json_string(device->name[0] ? device->name : "unknown"));
    if (device->model[0] != '\0')
        json_object_set_new(about, "model", json_string(device->model));
    if (device->fs[0] != '\0') {
        json_object_set_new(about, "file_system", json_string(device->fs));
        json_object_set_new(about, "mount_options", json_string(device->options));
    }
    uint64_t now[3];
    if (device->known && sample(device, now)) {
        double elapsed_ms = (double)(kvio_time_ns() - device->start_ns) / 1e6;
        json_object_set_new(about, "bytes_read",
                            json_integer((json_int_t)((now[0] - device->start[0]) * 512)));
        json_object_set_new(about, "bytes_written",
                            json_integer((json_int_t)((now[1] - device->start[1]) * 512)));
        json_object_set_new(about, "utilization",
                            json_real(elapsed_ms > 0 ? (double)(now[2] - device->start[2]) /
                                                           elapsed_ms
                                                     : 0));
    }
    json_object_set_new(object, "device", about);
}
