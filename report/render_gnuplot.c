/* The PNG renderer: writes one gnuplot script that draws every chart of the
 * report (the same chart set as the HTML page) into DIR/<chart id>.png with
 * the pngcairo terminal, then runs gnuplot on it when it is installed. */
#include "kvio/report.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "report/report_int.h"

/* A gnuplot single-quoted string: quotes doubled, control bytes dropped. */
static void gp_string(FILE *out, const char *text)
{
    fputc('\'', out);
    for (const char *c = text; *c != '\0'; c++) {
        if (*c == '\'')
            fputs("''", out);
        else if ((unsigned char)*c >= 0x20)
            fputc(*c, out);
    }
    fputc('\'', out);
}

/* A category label inside a data block: double-quoted, no quotes inside. */
static void gp_data_label(FILE *out, const char *text)
{
    fputc('"', out);
    for (const char *c = text; *c != '\0'; c++)
        fputc(*c == '"' || *c == '\\' || (unsigned char)*c < 0x20 ? '_' : *c, out);
    fputc('"', out);
}

static void gp_lines(FILE *out, const report_chart_t *chart, size_t index)
{
    if (chart->x_log)
        fputs("set logscale x 10\nset format x '%.0s%c'\n", out);
    if (chart->x_fixed)
        fprintf(out, "set xrange [%.10g:%.10g]\n", chart->x_min, chart->x_max);
    else if (!chart->x_log)
        fputs("set xrange [0:*]\n", out);
    for (size_t m = 0; m < chart->num_marks; m++)
        fprintf(out, "set arrow from %.10g, graph 0 to %.10g, graph 1 nohead dt 2 lc rgb '#888888'\n",
                chart->marks[m], chart->marks[m]);
    for (size_t m = 0; m < chart->num_y_marks; m++)
        fprintf(out, "set arrow from graph 0, first %.10g to graph 1, first %.10g nohead dt 2 "
                     "lc rgb '#bb0000'\n",
                chart->y_marks[m], chart->y_marks[m]);
    for (size_t s = 0; s < chart->num_series; s++) {
        const chart_series_t *series = &chart->series[s];
        fprintf(out, "$d%zu_%zu << EOD\n", index, s);
        for (size_t i = 0; i < series->count; i++)
            if ((!chart->x_log || series->x[i] > 0) && (!chart->y_log || series->y[i] > 0))
                fprintf(out, "%.10g %.10g\n", series->x[i], series->y[i]);
        if (series->count == 0)
            fputs("0 0\n", out);
        fputs("EOD\n", out);
    }
    fputs("plot ", out);
    for (size_t s = 0; s < chart->num_series; s++) {
        const chart_series_t *series = &chart->series[s];
        fprintf(out, "%s$d%zu_%zu using 1:2 with %s lw 2 dt %d lc rgb '%s' title ",
                s > 0 ? ", \\\n     " : "", index, s,
                series->step ? "steps" : series->count <= 12 ? "linespoints" : "lines",
                series->dashed ? 2 : 1, report_series_color(series, s));
        gp_string(out, series->label);
    }
    fputc('\n', out);
}

static void gp_bars(FILE *out, const report_chart_t *chart, size_t index)
{
    fprintf(out, "set style data histograms\nset style histogram %s\n"
                 "set style fill solid 0.9 border -1\nset boxwidth 0.8\n",
            chart->kind == CHART_STACKED ? "rowstacked" : "clustered gap 1");
    if (chart->num_categories > 4)
        fputs("set xtics rotate by -30\n", out);
    fprintf(out, "$d%zu << EOD\n", index);
    for (size_t c = 0; c < chart->num_categories; c++) {
        gp_data_label(out, chart->categories[c]);
        for (size_t s = 0; s < chart->num_series; s++) {
            double value = chart->series[s].y[c];
            if (!isfinite(value))
                fputs(" NaN", out); /* none: no bar (gnuplot skips NaN) */
            else
                fprintf(out, " %.10g", value > 0 ? value : 0);
        }
        fputc('\n', out);
    }
    fputs("EOD\nplot ", out);
    for (size_t s = 0; s < chart->num_series; s++) {
        if (s == 0)
            fprintf(out, "$d%zu using 2:xtic(1) lc rgb '%s' title ", index,
                    report_series_color(&chart->series[s], s));
        else
            fprintf(out, ", \\\n     '' using %zu lc rgb '%s' title ", s + 2,
                    report_series_color(&chart->series[s], s));
        gp_string(out, chart->series[s].label);
    }
    fputc('\n', out);
}

/* The largest value a chart draws (stacks summed). */
static double chart_max(const report_chart_t *chart)
{
    double high = 0;
    if (chart->kind == CHART_LINES) {
        for (size_t s = 0; s < chart->num_series; s++)
            for (size_t i = 0; i < chart->series[s].count; i++)
                high = fmax(high, chart->series[s].y[i]);
        return high;
    }
    for (size_t c = 0; c < chart->num_categories; c++) {
        double sum = 0;
        for (size_t s = 0; s < chart->num_series; s++)
            sum = chart->kind == CHART_STACKED ? sum + fmax(chart->series[s].y[c], 0)
                                               : fmax(sum, chart->series[s].y[c]);
        high = fmax(high, sum);
    }
    return high;
}

kvio_status_t report_render_gnuplot(const kvio_report_t *report, const char *dir, FILE *out,
                                    size_t *num_charts_p)
{
    fputs("# kvio report: every chart of report.html as PNG (gnuplot 5).\n"
          "set terminal pngcairo size 960,600 font 'DejaVu Sans,11' noenhanced\n"
          "set encoding utf8\n",
          out);
    size_t count = 0;
    for (size_t i = 0; i < report->num_charts; i++) {
        const report_chart_t *chart = report->charts[i];
        if (chart->num_series == 0)
            continue;
        char path[REPORT_PATH_MAX + 96];
        snprintf(path, sizeof(path), "%s/%s.png", dir, chart->id);
        fputs("\nreset\nset output ", out);
        gp_string(out, path);
        fputs("\nset title ", out);
        gp_string(out, chart->title);
        fputs("\nset xlabel ", out);
        gp_string(out, chart->x_label);
        fputs("\nset ylabel ", out);
        gp_string(out, chart->y_label);
        fputs("\nset key outside below\nset grid ytics\n", out);
        if (chart->y_log && chart->kind != CHART_STACKED)
            fputs("set logscale y 10\nset format y '%.0s%c'\nset yrange [*:*]\n", out);
        else if (chart->y_fixed)
            fprintf(out, "set yrange [%.10g:%.10g]\n", chart->y_min, chart->y_max);
        else if (chart_max(chart) > 0)
            fputs("set yrange [0:*]\n", out);
        else
            fputs("set yrange [0:1]\n", out); /* all zero: gnuplot cannot autoscale */
        if (chart->y_integer)
            fputs("set ytics 1\nset format y '%.0f'\n", out);
        if (chart->kind == CHART_LINES)
            gp_lines(out, chart, i);
        else
            gp_bars(out, chart, i);
        count++;
    }
    fputs("\nunset output\n", out);
    *num_charts_p = count;
    return ferror(out) ? KVIO_ERR_IO : KVIO_OK;
}

/* How long gnuplot may take (a hung one held kvio report forever);
 * $KVIO_GNUPLOT_TIMEOUT seconds overrides it. */
#define GNUPLOT_TIMEOUT_S 120.0

/* The gnuplot to run: $KVIO_GNUPLOT, or the first gnuplot on $PATH. A
 * $KVIO_GNUPLOT that cannot run says why in why_p (else why_p is ""). */
static bool find_gnuplot(char *path_p, size_t path_len, char *why_p, size_t why_len)
{
    const char *forced = getenv("KVIO_GNUPLOT");
    if (why_len > 0)
        why_p[0] = '\0';
    if (forced != NULL && forced[0] != '\0') {
        snprintf(path_p, path_len, "%s", forced);
        if (access(forced, X_OK) == 0)
            return true;
        snprintf(why_p, why_len, "KVIO_GNUPLOT=%s: %s", forced, strerror(errno));
        return false;
    }
    const char *search = getenv("PATH");
    if (search == NULL)
        search = "/usr/bin:/bin";
    while (*search != '\0') {
        const char *colon = strchr(search, ':');
        size_t length = colon != NULL ? (size_t)(colon - search) : strlen(search);
        if (length > 0 && length < path_len - 16) {
            snprintf(path_p, path_len, "%.*s/gnuplot", (int)length, search);
            struct stat info;
            if (stat(path_p, &info) == 0 && S_ISREG(info.st_mode) && access(path_p, X_OK) == 0)
                return true;
        }
        search += length + (colon != NULL ? 1 : 0);
    }
    return false;
}

bool kvio_report_gnuplot_available(void)
{
    char path[4096], why[64];
    return find_gnuplot(path, sizeof(path), why, sizeof(why));
}

/* Runs gnuplot on script: stdin /dev/null, its own process group (killed
 * whole at the timeout), and killed if kvio dies first (it outlived a
 * killed kvio report). */
static kvio_status_t run_gnuplot(const char *gnuplot, const char *script, char *error_p,
                                 size_t error_len)
{
    const char *limit = getenv("KVIO_GNUPLOT_TIMEOUT");
    double timeout_s = limit != NULL && atof(limit) > 0 ? atof(limit) : GNUPLOT_TIMEOUT_S;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(error_p, error_len, "%s: cannot start: %s", gnuplot, strerror(errno));
        return KVIO_ERR_IO;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127); /* kvio died before the line above */
        setpgid(0, 0);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        char *argv[] = {(char *)gnuplot, (char *)script, NULL};
        execv(gnuplot, argv);
        _exit(127);
    }
    setpgid(pid, pid); /* (either side may win the race; both set it) */
    int wait_status = 0;
    double waited = 0;
    pid_t done;
    while ((done = waitpid(pid, &wait_status, WNOHANG)) == 0 && waited < timeout_s) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 10000000};
        nanosleep(&pause, NULL);
        waited += 0.01;
    }
    if (done == 0) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR)
            ;
        snprintf(error_p, error_len, "%s did not finish %s within %.0f s (stopped; "
                 "KVIO_GNUPLOT_TIMEOUT sets the limit)", gnuplot, script, timeout_s);
        return KVIO_ERR_TIMEOUT;
    }
    if (done < 0 || !WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
        bool exited = done > 0 && WIFEXITED(wait_status);
        if (exited && WEXITSTATUS(wait_status) == 127)
            snprintf(error_p, error_len, "%s: cannot start", gnuplot);
        else
            snprintf(error_p, error_len, "gnuplot failed on %s (%s %d)", script,
                     exited ? "exit status" : "signal",
                     exited ? WEXITSTATUS(wait_status) : WTERMSIG(wait_status));
        return KVIO_ERR_IO;
    }
    return KVIO_OK;
}

kvio_status_t kvio_report_write_png(kvio_report_t *report, const char *dir,
                                    size_t *num_written_p, char *error_p, size_t error_len)
{
    char gnuplot[4096], why[4200];
    if (!find_gnuplot(gnuplot, sizeof(gnuplot), why, sizeof(why))) {
        if (why[0] != '\0')
            snprintf(error_p, error_len, "--png: %s", why);
        else
            snprintf(error_p, error_len,
                     "--png needs gnuplot, which is not installed (scripts/bootstrap.sh --dev "
                     "or apt-get install gnuplot installs it)");
        return KVIO_ERR_UNSUPPORTED;
    }
    char script[REPORT_PATH_MAX + 32];
    snprintf(script, sizeof(script), "%s/report.gp", dir);
    FILE *out = NULL;
    kvio_status_t status = report_build_open(report, script, &out, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    size_t count = 0;
    status = report_render_gnuplot(report, dir, out, &count);
    if (fclose(out) != 0 && status == KVIO_OK)
        status = KVIO_ERR_IO;
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s: cannot write the gnuplot script", script);
        return status;
    }
    status = run_gnuplot(gnuplot, script, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    *num_written_p = count;
    return KVIO_OK;
}
