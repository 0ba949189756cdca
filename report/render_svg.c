/* The HTML renderer: one self-contained page (inline CSS, inline SVG, no
 * scripts, no external references) with a table of the runs and the charts,
 * each with a title, axis titles with units, ticks, a legend and a caption.
 * Also the tick helpers the gnuplot renderer shares. */
#include "report/report_int.h"

#include "kvio/results.h"

#include <math.h>
#include <string.h>

#define SVG_WIDTH 640.0
#define PLOT_LEFT 72.0
#define PLOT_RIGHT 20.0
#define PLOT_TOP 44.0
#define PLOT_HEIGHT 270.0
#define CHAR_WIDTH 6.4 /* mean advance of an 11px sans-serif character */
#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"

static const char *const palette[] = {
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#7F7F7F", "#8C564B",
};
#define PALETTE_SIZE (sizeof(palette) / sizeof(palette[0]))

/* ---------- ticks (shared with gnuplot) ---------- */

double report_nice_step(double range, int target_ticks)
{
    if (!(range > 0) || !isfinite(range))
        return 1;
    double raw = range / (target_ticks > 0 ? target_ticks : 5);
    double magnitude = pow(10, floor(log10(raw)));
    double fraction = raw / magnitude;
    double nice = fraction <= 1     ? 1
                  : fraction <= 2   ? 2
                  : fraction <= 2.5 ? 2.5
                  : fraction <= 5   ? 5
                                    : 10;
    return nice * magnitude;
}

void report_format_tick(double value, double step, char *text_p, size_t text_len)
{
    if (!isfinite(value)) {
        snprintf(text_p, text_len, "?");
        return;
    }
    if (fabs(value) < step * 1e-9) {
        snprintf(text_p, text_len, "0");
        return;
    }
    static const struct {
        double scale;
        const char *suffix;
    } units[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    double scale = 1;
    const char *suffix = "";
    for (size_t i = 0; i < 4; i++) {
        /* One unit per axis: chosen from the step, so 5k sits next to 10k. */
        if (step >= units[i].scale) {
            scale = units[i].scale;
            suffix = units[i].suffix;
            break;
        }
    }
    double scaled_step = step / scale;
    int decimals = scaled_step >= 1 ? 0 : (int)ceil(-log10(scaled_step) - 1e-9);
    double shifted = scaled_step * pow(10, decimals);
    if (decimals < 6 && fabs(shifted - round(shifted)) > 1e-6)
        decimals++;
    if (decimals > 6)
        decimals = 6;
    snprintf(text_p, text_len, "%.*f%s", decimals, value / scale, suffix);
}

/* ---------- output helpers ---------- */

static void xml_text(FILE *out, const char *text)
{
    for (const char *c = text; *c != '\0'; c++) {
        switch (*c) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&#39;", out); break;
        default:
            if ((unsigned char)*c >= 0x20 && *c != 0x7F)
                fputc(*c, out);
        }
    }
}

/* Display width of a UTF-8 label in characters. */
static size_t text_chars(const char *text)
{
    size_t count = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++)
        count += (*c & 0xC0) != 0x80;
    return count;
}

/* Copies at most max_chars characters of text, ending with "..." when cut. */
static void truncate_label(const char *text, size_t max_chars, char *label_p, size_t label_len)
{
    size_t chars = 0, bytes = 0;
    const unsigned char *c = (const unsigned char *)text;
    size_t total = text_chars(text);
    size_t keep = total <= max_chars ? total : max_chars - 1;
    while (c[bytes] != '\0' && bytes + 8 < label_len) {
        if ((c[bytes] & 0xC0) != 0x80) {
            if (chars == keep)
                break;
            chars++;
        }
        bytes++;
    }
    memcpy(label_p, text, bytes);
    label_p[bytes] = '\0';
    if (keep < total)
        strcat(label_p, "\xE2\x80\xA6"); /* … */
}

/* A series' colour, and whether it is drawn dashed (a second round of the
 * palette is dashed so that more than eight lines stay apart). */
const char *report_series_color(const chart_series_t *series, size_t index)
{
    size_t slot = series->color > 0 ? (size_t)(series->color - 1) : index;
    return palette[slot % PALETTE_SIZE];
}

static bool series_dashed(const chart_series_t *series, size_t index)
{
    size_t slot = series->color > 0 ? (size_t)(series->color - 1) : index;
    return series->dashed || (slot / PALETTE_SIZE) % 2 == 1;
}

typedef struct axis {
    double min, max, step;
    bool log;
} axis_t;

static void axis_linear(axis_t *axis, double low, double high, bool fixed)
{
    axis->log = false;
    if (!fixed) {
        if (low > 0)
            low = 0;
        if (!(high > low))
            high = low + 1;
    }
    axis->step = report_nice_step(high - low, 5);
    if (!fixed) {
        high = ceil(high / axis->step - 1e-9) * axis->step;
        low = floor(low / axis->step + 1e-9) * axis->step;
    }
    axis->min = low;
    axis->max = high > low ? high : low + 1;
}

/* A count's axis: whole-number ticks (no "0.5 preemptions"). */
static void axis_whole(axis_t *axis)
{
    if (axis->log || axis->step >= 1)
        return;
    axis->step = 1;
    axis->min = floor(axis->min);
    axis->max = ceil(axis->max);
    if (axis->max <= axis->min)
        axis->max = axis->min + 1;
}

static void axis_log(axis_t *axis, double low, double high)
{
    axis->log = true;
    if (!(low > 0))
        low = 1;
    if (!(high > low))
        high = low * 10;
    axis->min = pow(10, floor(log10(low) + 1e-9));
    axis->max = pow(10, ceil(log10(high) - 1e-9));
    if (axis->max <= axis->min)
        axis->max = axis->min * 10;
    axis->step = 1;
}

/* The y axis a chart asks for over [low, high] (log, fixed or fitted; whole
 * ticks for counts). */
static void axis_y(axis_t *axis, const report_chart_t *chart, double low, double high)
{
    if (chart->y_log)
        axis_log(axis, low, high);
    else if (chart->y_fixed)
        axis_linear(axis, chart->y_min, chart->y_max, true);
    else
        axis_linear(axis, low, high, false);
    if (chart->y_integer)
        axis_whole(axis);
}

static double axis_fraction(const axis_t *axis, double value)
{
    if (axis->log) {
        if (!(value > 0))
            value = axis->min;
        return (log10(value) - log10(axis->min)) / (log10(axis->max) - log10(axis->min));
    }
    return (value - axis->min) / (axis->max - axis->min);
}

/* Pixel coordinates, clamped far outside so that clipping does the rest. */
static double clamp_pixel(double value)
{
    if (!isfinite(value))
        return 0;
    return value < -1e5 ? -1e5 : value > 1e5 ? 1e5 : value;
}

typedef struct frame {
    double left, top, width, height;
    axis_t x, y;
} frame_t;

static double pixel_x(const frame_t *frame, double value)
{
    return clamp_pixel(frame->left + axis_fraction(&frame->x, value) * frame->width);
}

static double pixel_y(const frame_t *frame, double value)
{
    double fraction = axis_fraction(&frame->y, value);
    return clamp_pixel(frame->top + frame->height - fraction * frame->height);
}

/* ---------- parts of a chart ---------- */

static void draw_y_axis(FILE *out, const frame_t *frame, const char *label)
{
    int guard = 0;
    for (double tick = frame->y.min; tick <= frame->y.max * (frame->y.log ? 1.0001 : 1) +
                                                 (frame->y.log ? 0 : frame->y.step * 1e-6) &&
                                     guard < 50;
         tick = frame->y.log ? tick * 10 : tick + frame->y.step, guard++) {
        double y = pixel_y(frame, tick);
        char text[32];
        report_format_tick(tick, frame->y.log ? tick : frame->y.step, text, sizeof(text));
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                frame->left, y, frame->left + frame->width, y, frame->left - 6, y + 4, text);
    }
    double middle = frame->top + frame->height / 2;
    fprintf(out,
            "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.1f)\" "
            "font-size=\"12\">",
            middle, middle);
    xml_text(out, label);
    fputs("</text>\n", out);
}

static void draw_x_axis(FILE *out, const frame_t *frame, const char *label)
{
    double bottom = frame->top + frame->height;
    if (frame->x.log) {
        for (double tick = frame->x.min; tick <= frame->x.max * 1.0001; tick *= 10) {
            double x = pixel_x(frame, tick);
            char text[32];
            report_format_tick(tick, tick, text, sizeof(text));
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                    x, frame->top, x, bottom, x, bottom + 16, text);
        }
    } else {
        int guard = 0;
        for (double tick = frame->x.min; tick <= frame->x.max + frame->x.step * 1e-6 && guard < 50;
             tick += frame->x.step, guard++) {
            double x = pixel_x(frame, tick);
            char text[32];
            report_format_tick(tick, frame->x.step, text, sizeof(text));
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                    x, frame->top, x, bottom, x, bottom + 16, text);
        }
    }
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">",
            frame->left + frame->width / 2, bottom + 36);
    xml_text(out, label);
    fputs("</text>\n", out);
}

typedef struct legend_item {
    const char *label;
    const char *color;
    bool dashed;
    bool box; /* bars: a filled square; lines: a stroke */
} legend_item_t;

/* Lays out legend items in rows within width; returns the rows used and
 * draws them when out is not NULL. */
static int legend(FILE *out, const legend_item_t *items, size_t count, double left, double top,
                  double width)
{
    double x = left;
    int rows = count > 0 ? 1 : 0;
    for (size_t i = 0; i < count; i++) {
        char label[REPORT_LABEL_MAX + 8];
        truncate_label(items[i].label, 60, label, sizeof(label));
        double item_width = 26 + CHAR_WIDTH * (double)text_chars(label) + 18;
        if (x > left && x + item_width > left + width) {
            x = left;
            rows++;
        }
        double y = top + (rows - 1) * 18;
        if (out != NULL) {
            if (items[i].box)
                fprintf(out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>",
                        x, y - 9, items[i].color);
            else
                fprintf(out,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                        "stroke-width=\"2.5\"%s/>",
                        x, y - 4, x + 20, y - 4, items[i].color,
                        items[i].dashed ? " stroke-dasharray=\"6 3\"" : "");
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 26, y);
            xml_text(out, label);
            fputs("</text>\n", out);
        }
        x += item_width;
    }
    return rows;
}

static void svg_open(FILE *out, const report_chart_t *chart, double height)
{
    fprintf(out,
            "<svg viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" "
            "height=\"%.0f\" role=\"img\" aria-labelledby=\"%s-title\" font-family=\"%s\" "
            "font-size=\"11\" fill=\"#222\">\n<title id=\"%s-title\">",
            SVG_WIDTH, height, SVG_WIDTH, height, chart->id, FONT, chart->id);
    xml_text(out, chart->title);
    fprintf(out, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n"
                 "<text x=\"%.1f\" y=\"24\" text-anchor=\"middle\" font-size=\"14\" "
                 "font-weight=\"bold\">",
            SVG_WIDTH / 2);
    char title[200];
    truncate_label(chart->title, 80, title, sizeof(title));
    xml_text(out, title);
    fputs("</text>\n", out);
}

/* ---------- line charts ---------- */

static void render_lines(FILE *out, const report_chart_t *chart)
{
    double x_low = INFINITY, x_high = -INFINITY, y_low = INFINITY, y_high = -INFINITY;
    for (size_t s = 0; s < chart->num_series; s++) {
        const chart_series_t *series = &chart->series[s];
        for (size_t i = 0; i < series->count; i++) {
            if (chart->x_log && !(series->x[i] > 0))
                continue;
            x_low = fmin(x_low, series->x[i]);
            x_high = fmax(x_high, series->x[i]);
            y_low = fmin(y_low, series->y[i]);
            y_high = fmax(y_high, series->y[i]);
        }
    }
    if (chart->y_log) { /* a log axis leaves out what is not above 0 */
        y_low = INFINITY;
        for (size_t s = 0; s < chart->num_series; s++)
            for (size_t i = 0; i < chart->series[s].count; i++)
                if (chart->series[s].y[i] > 0)
                    y_low = fmin(y_low, chart->series[s].y[i]);
    }
    for (size_t m = 0; m < chart->num_marks && isfinite(x_low) && !chart->x_log; m++) {
        x_low = fmin(x_low, chart->marks[m]);
        x_high = fmax(x_high, chart->marks[m]);
    }
    for (size_t m = 0; m < chart->num_y_marks && isfinite(y_low); m++) {
        y_low = fmin(y_low, chart->y_marks[m]);
        y_high = fmax(y_high, chart->y_marks[m]);
    }
    if (!isfinite(x_low)) {
        x_low = chart->x_log ? 1 : 0;
        x_high = chart->x_log ? 10 : 1;
        y_low = 0;
        y_high = 1;
    }
    frame_t frame = {.left = PLOT_LEFT, .top = PLOT_TOP,
                     .width = SVG_WIDTH - PLOT_LEFT - PLOT_RIGHT, .height = PLOT_HEIGHT};
    if (chart->x_log)
        axis_log(&frame.x, x_low, x_high);
    else if (chart->x_fixed)
        axis_linear(&frame.x, chart->x_min, chart->x_max, true);
    else
        axis_linear(&frame.x, x_low, x_high * 1.0, false);
    axis_y(&frame.y, chart, y_low, chart->y_log ? y_high : y_high * 1.05);

    legend_item_t items[64];
    size_t num_items = chart->num_series < 64 ? chart->num_series : 64;
    for (size_t s = 0; s < num_items; s++)
        items[s] = (legend_item_t){chart->series[s].label,
                                   report_series_color(&chart->series[s], s),
                                   series_dashed(&chart->series[s], s), false};
    double legend_top = frame.top + frame.height + 60;
    int rows = legend(NULL, items, num_items, frame.left, legend_top, frame.width);
    double height = legend_top + rows * 18 + 4;
    svg_open(out, chart, height);
    fprintf(out,
            "<clipPath id=\"%s-clip\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
            "height=\"%.1f\"/></clipPath>\n",
            chart->id, frame.left, frame.top - 2, frame.width, frame.height + 4);
    draw_y_axis(out, &frame, chart->y_label);
    draw_x_axis(out, &frame, chart->x_label);
    /* Marks: activations (vertical, grey), an SLO (horizontal, red). */
    for (size_t m = 0; m < chart->num_marks + chart->num_y_marks; m++) {
        bool vertical = m < chart->num_marks;
        double at = vertical ? pixel_x(&frame, chart->marks[m])
                             : pixel_y(&frame, chart->y_marks[m - chart->num_marks]);
        double from = vertical ? frame.left : frame.top;
        if (at < from || at > from + (vertical ? frame.width : frame.height))
            continue;
        fprintf(out,
                "<line%s x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"%s\" stroke-dasharray=\"%s\"/>\n",
                vertical ? "" : " class=\"y-mark\"", vertical ? at : frame.left,
                vertical ? frame.top : at, vertical ? at : frame.left + frame.width,
                vertical ? frame.top + frame.height : at, vertical ? "#888" : "#b00",
                vertical ? "1" : "1.2", vertical ? "4 3" : "6 4");
    }
    for (size_t s = 0; s < chart->num_series; s++) {
        const chart_series_t *series = &chart->series[s];
        if (series->count == 0)
            continue;
        fprintf(out,
                "<polyline clip-path=\"url(#%s-clip)\" fill=\"none\" stroke=\"%s\" "
                "stroke-width=\"2\" stroke-linejoin=\"round\"%s points=\"",
                chart->id, report_series_color(series, s),
                series_dashed(series, s) ? " stroke-dasharray=\"6 3\"" : "");
        for (size_t i = 0; i < series->count; i++) {
            if ((chart->x_log && !(series->x[i] > 0)) || (chart->y_log && !(series->y[i] > 0)))
                continue;
            double x = pixel_x(&frame, series->x[i]), y = pixel_y(&frame, series->y[i]);
            if (series->step && i > 0)
                fprintf(out, "%.1f,%.1f ", x, pixel_y(&frame, series->y[i - 1]));
            fprintf(out, "%.1f,%.1f ", x, y);
        }
        fputs("\"/>\n", out);
        /* Few points (a capacity sweep): mark them. */
        if (series->count <= 12 && !series->dashed) {
            for (size_t i = 0; i < series->count; i++)
                if (!chart->x_log || series->x[i] > 0)
                    fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>",
                            pixel_x(&frame, series->x[i]), pixel_y(&frame, series->y[i]),
                            report_series_color(series, s));
            fputc('\n', out);
        }
    }
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#888\"/>\n",
            frame.left, frame.top, frame.width, frame.height);
    legend(out, items, num_items, frame.left, legend_top, frame.width);
    fputs("</svg>\n", out);
}

/* ---------- bar charts ---------- */

static void render_bars(FILE *out, const report_chart_t *chart)
{
    bool stacked = chart->kind == CHART_STACKED;
    bool log = chart->y_log && !stacked;
    bool signed_bars = chart->y_signed && !stacked && !log;
    double high = 0, low = INFINITY, lowest = 0; /* lowest: signed bars' bottom */
    for (size_t c = 0; c < chart->num_categories; c++) {
        double sum = 0;
        for (size_t s = 0; s < chart->num_series; s++) {
            const chart_series_t *series = &chart->series[s];
            if (!isfinite(series->y[c]))
                continue; /* none (a run without an SLO has no goodput) */
            double value = fmax(series->y[c], 0);
            if (series->high != NULL && isfinite(series->high[c]))
                value = fmax(value, series->high[c]);
            sum = stacked ? sum + value : fmax(sum, value);
            if (series->y[c] > 0)
                low = fmin(low, series->y[c]);
            if (signed_bars) {
                lowest = fmin(lowest, series->y[c]);
                if (series->low != NULL && isfinite(series->low[c]))
                    lowest = fmin(lowest, series->low[c]);
            }
        }
        high = fmax(high, sum);
    }
    frame_t frame = {.left = PLOT_LEFT, .top = PLOT_TOP,
                     .width = SVG_WIDTH - PLOT_LEFT - PLOT_RIGHT, .height = PLOT_HEIGHT};
    frame.x.min = 0;
    frame.x.max = 1;
    if (log)
        axis_log(&frame.y, low, high);
    else if (chart->y_fixed)
        axis_linear(&frame.y, chart->y_min, chart->y_max, true);
    else if (signed_bars && lowest < 0)
        axis_linear(&frame.y, lowest * 1.08, high * 1.08, false);
    else
        axis_linear(&frame.y, 0, high > 0 ? high * 1.08 : 1, false);
    if (chart->y_integer)
        axis_whole(&frame.y);

    /* Category labels: horizontal when they fit their slot, else slanted. */
    size_t num_categories = chart->num_categories > 0 ? chart->num_categories : 1;
    double slot = frame.width / (double)num_categories;
    size_t longest = 0;
    for (size_t c = 0; c < chart->num_categories; c++) {
        size_t chars = text_chars(chart->categories[c]);
        longest = chars > longest ? chars : longest;
    }
    size_t max_chars = 28;
    bool slanted = CHAR_WIDTH * (double)(longest < max_chars ? longest : max_chars) > slot - 6;
    /* A slanted label reaches left of its slot by its width times cos 35°:
     * the plot moves right until the first labels end inside the picture. */
    for (size_t c = 0; slanted && c < chart->num_categories; c++) {
        size_t chars = text_chars(chart->categories[c]);
        double reach = 0.82 * CHAR_WIDTH * (double)(chars < max_chars ? chars : max_chars);
        double anchor = frame.left + slot * ((double)c + 0.5) + 4;
        if (reach + 4 > anchor) {
            double shift = reach + 4 - anchor;
            frame.left += shift;
            frame.width -= shift;
            slot = frame.width / (double)num_categories;
        }
    }
    double label_depth = slanted ? 0.6 * CHAR_WIDTH * (double)(longest < max_chars ? longest
                                                                                   : max_chars) + 8
                                 : 0;
    legend_item_t items[64];
    size_t num_items = chart->num_series < 64 ? chart->num_series : 64;
    for (size_t s = 0; s < num_items; s++)
        items[s] = (legend_item_t){chart->series[s].label, palette[s % PALETTE_SIZE], false, true};
    double legend_top = frame.top + frame.height + 60 + label_depth;
    int rows = legend(NULL, items, num_items, frame.left, legend_top, frame.width);
    double height = legend_top + rows * 18 + 4;
    svg_open(out, chart, height);
    draw_y_axis(out, &frame, chart->y_label);
    double bottom = frame.top + frame.height;
    /* Bars no wider than 64 px (120 px stacked), however few there are. */
    size_t per_group = stacked || chart->num_series == 0 ? 1 : chart->num_series;
    double group = fmin(slot * 0.78, (stacked ? 120.0 : 64.0) * (double)per_group);
    double bar = group / (double)per_group;
    size_t total_bars = chart->num_categories * (stacked ? 1 : chart->num_series);
    bool values = total_bars <= 16 && !stacked && bar >= 30;
    for (size_t c = 0; c < chart->num_categories; c++) {
        double group_left = frame.left + slot * (double)c + (slot - group) / 2;
        double base = 0;
        for (size_t s = 0; s < chart->num_series; s++) {
            const chart_series_t *series = &chart->series[s];
            if (!isfinite(series->y[c]))
                continue;
            double value = signed_bars ? series->y[c] : fmax(series->y[c], 0);
            double x = stacked ? group_left : group_left + bar * (double)s;
            double y0 = log ? frame.top + frame.height : pixel_y(&frame, stacked ? base : 0);
            double y1 = pixel_y(&frame, stacked ? base + value : value);
            fprintf(out,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                    "<title>",
                    x + 1, fmin(y0, y1), fmax(bar - 2, 1), fabs(y0 - y1),
                    palette[s % PALETTE_SIZE]);
            char text[32];
            report_format_tick(value,
                               value != 0 ? pow(10, floor(log10(fabs(value))) - 2) : 1, text,
                               sizeof(text));
            xml_text(out, chart->categories[c]);
            fputs(", ", out);
            xml_text(out, series->label);
            fprintf(out, ": %s</title></rect>\n", text);
            if (series->low != NULL && series->high != NULL && !stacked &&
                series->high[c] > series->low[c]) {
                double middle = x + bar / 2;
                double low_y = pixel_y(&frame, series->low[c]);
                double high_y = pixel_y(&frame, series->high[c]);
                fprintf(out,
                        "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" "
                        "stroke=\"#222\" stroke-width=\"1.2\" fill=\"none\"/>\n",
                        middle, low_y, high_y, middle - 4, low_y, middle + 4, middle - 4, high_y,
                        middle + 4);
            } else if (values) {
                fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                             "font-size=\"10\">%s</text>\n",
                        x + bar / 2, fmin(y0, y1) - 4, text);
            }
            base += value;
        }
        char label[REPORT_LABEL_MAX + 8];
        truncate_label(chart->categories[c], max_chars, label, sizeof(label));
        double middle = frame.left + slot * ((double)c + 0.5);
        if (slanted)
            fprintf(out,
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                    "transform=\"rotate(-35 %.1f %.1f)\">",
                    middle + 4, bottom + 14, middle + 4, bottom + 14);
        else
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", middle,
                    bottom + 16);
        xml_text(out, label);
        fputs("</text>\n", out);
    }
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">",
            frame.left + frame.width / 2, bottom + 36 + label_depth);
    xml_text(out, chart->x_label);
    fputs("</text>\n", out);
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#888\"/>\n",
            frame.left, frame.top, frame.width, frame.height);
    legend(out, items, num_items, frame.left, legend_top, frame.width);
    fputs("</svg>\n", out);
}

/* ---------- the page ---------- */

static const char style[] =
    "body{font-family:" FONT ";margin:24px;color:#222;background:#f6f6f6;max-width:1400px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}"
    "p.meta{color:#555;font-size:13px;margin:0 0 12px}"
    "table{border-collapse:collapse;background:#fff;font-size:12px}"
    "th,td{border:1px solid #ddd;padding:4px 7px;text-align:right;vertical-align:top}"
    "th{background:#eee}td.text,th.text{text-align:left}td.dir{font-size:11px;color:#555;"
    "word-break:break-all;max-width:260px}"
    ".grid{display:flex;flex-wrap:wrap;gap:16px}"
    "figure{margin:0;background:#fff;border:1px solid #ddd;padding:8px;width:640px}"
    "figure svg{display:block;width:640px;height:auto}"
    "figcaption{font-size:12px;color:#555;margin-top:4px;line-height:1.35}"
    "ul.notes{font-size:13px;color:#7a4b00}td.badge{color:#b00000}";

/* A number cell; "-" for none (a run without the metric). */
static void cell_number(FILE *out, double value, int decimals)
{
    if (isfinite(value))
        fprintf(out, "<td>%.*f</td>", decimals, value);
    else
        fputs("<td>-</td>", out);
}

static double seed_mean(const report_run_t *run, size_t offset)
{
    double sum = 0;
    for (size_t s = 0; s < run->num_seeds; s++)
        sum += *(const double *)((const char *)&run->seeds[s] + offset);
    return run->num_seeds > 0 ? sum / (double)run->num_seeds : 0;
}

static void runs_table(FILE *out, const kvio_report_t *report)
{
    fputs("<h2>Runs</h2>\n<table id=\"runs\">\n<tr><th class=\"text\">run</th>"
          "<th class=\"text\">directory</th><th class=\"text\">workload</th>"
          "<th class=\"text\">scheduler</th><th>seeds</th><th>requests</th>"
          "<th>TTFT p50 (ms)</th><th>TTFT p99 (ms)</th><th>TPOT p50 (ms)</th>"
          "<th>E2EL p99 (ms)</th><th>throughput (req/s)</th><th>goodput (req/s)</th>"
          "<th>output (tok/s)</th><th>hit rate (%)</th><th>preemptions</th>"
          "<th>update p50 (ms)</th><th>update GB/s</th>"
          "<th class=\"text\">complete</th><th class=\"text\">verdict</th>"
          "<th class=\"text\">host</th><th class=\"text\">commit</th></tr>\n",
          out);
    for (size_t r = 0; r < report->num_runs; r++) {
        const report_run_t *run = report->runs[r];
        fputs("<tr><td class=\"text\">", out);
        xml_text(out, run->label);
        fputs("</td><td class=\"text dir\">", out);
        char dir[REPORT_PATH_MAX];
        report_label_copy(dir, sizeof(dir), run->dir);
        xml_text(out, dir);
        fputs("</td><td class=\"text\">", out);
        xml_text(out, run->name);
        fputs("</td><td class=\"text\">", out);
        xml_text(out, run->scheduler);
        fprintf(out, "</td><td>%zu</td>", run->num_seeds);
        /* A run without serving (updates only) has none of these: "-". */
        static const struct {
            size_t offset;
            double scale;
            int decimals;
        } cells[] = {
            {offsetof(run_metrics_t, completed), 1, 0},
            {offsetof(run_metrics_t, ttft_p50), 1, 2},
            {offsetof(run_metrics_t, ttft_p99), 1, 2},
            {offsetof(run_metrics_t, tpot_p50), 1, 2},
            {offsetof(run_metrics_t, e2el_p99), 1, 1},
            {offsetof(run_metrics_t, request_throughput), 1, 2},
            {offsetof(run_metrics_t, goodput), 1, 2},
            {offsetof(run_metrics_t, output_throughput), 1, 1},
            {offsetof(run_metrics_t, hit_rate), 100, 2},
            {offsetof(run_metrics_t, preemptions), 1, 0},
        };
        for (size_t c = 0; c < sizeof(cells) / sizeof(cells[0]); c++)
            cell_number(out, run->serving ? cells[c].scale * seed_mean(run, cells[c].offset) : NAN,
                        cells[c].decimals);
        /* Model updates ("-" without them), marked when modelled. */
        double update_ms = seed_mean(run, offsetof(run_metrics_t, update_p50_ms));
        if (run->modelled_updates && isfinite(update_ms))
            fprintf(out, "<td>%.1f (modelled)</td>", update_ms);
        else
            cell_number(out, update_ms, 1);
        cell_number(out, seed_mean(run, offsetof(run_metrics_t, update_gbps)), 2);
        fprintf(out, "<td class=\"text\">%s</td>",
                run->complete ? "yes" : "<b>no (interrupted)</b>");
        if (run->verdict[0] != '\0') {
            fputs("<td class=\"text badge\"><b>", out);
            xml_text(out, run->verdict);
            fputs("</b> (see summary.json warnings)</td>", out);
        } else {
            fputs("<td class=\"text\">valid</td>", out);
        }
        fputs("<td class=\"text\">", out);
        xml_text(out, run->host[0] != '\0' ? run->host : "-");
        fputs("</td><td class=\"text\">", out);
        xml_text(out, run->commit[0] != '\0' ? run->commit : "-");
        fputs("</td></tr>\n", out);
    }
    fputs("</table>\n<p class=\"meta\">Seeds: runs pooled into one line per compare variant "
          "(kvio compare --repeat); table values are means over seeds. A verdict other than "
          "valid names summary.json's warnings (overload, timing error, tier errors, more ranks "
          "than cores): those numbers mislead; charts mark such runs (!). (modelled): a "
          "simulate run's update times, from the transport model.</p>\n",
          out);
}

/* The other results' provenance and verdict: the paired controls and the
 * mlperf results, a row each. */
static void results_table(FILE *out, const kvio_report_t *report)
{
    if (report->num_paireds + report->num_mlperfs == 0)
        return;
    fputs("<h2>Other results</h2>\n<table id=\"results\">\n<tr><th class=\"text\">result</th>"
          "<th class=\"text\">directory</th><th class=\"text\">kind</th>"
          "<th class=\"text\">verdict</th><th class=\"text\">host</th>"
          "<th class=\"text\">commit</th></tr>\n",
          out);
    for (size_t i = 0; i < report->num_paireds + report->num_mlperfs; i++) {
        bool paired = i < report->num_paireds;
        const report_paired_t *pair = paired ? report->paireds[i] : NULL;
        const report_mlperf_t *mlperf = paired ? NULL : report->mlperfs[i - report->num_paireds];
        char kind[REPORT_LABEL_MAX], dir[REPORT_PATH_MAX];
        if (paired)
            snprintf(kind, sizeof(kind), "update.control: paired, %zu pairs", pair->num_pairs);
        else
            snprintf(kind, sizeof(kind), "kvio mlperf, %s, %lld client(s), %lld trial(s)",
                     mlperf->division, mlperf->clients, mlperf->trials);
        report_label_copy(dir, sizeof(dir), paired ? pair->dir : mlperf->dir);
        const char *cells[] = {paired ? pair->label : mlperf->label, dir, kind,
                               paired ? (pair->verdict[0] != '\0' ? pair->verdict : "valid")
                                      : "-",
                               paired ? pair->host : mlperf->host,
                               paired ? pair->commit : mlperf->commit};
        fputs("<tr>", out);
        for (size_t c = 0; c < sizeof(cells) / sizeof(cells[0]); c++) {
            fputs("<td class=\"text\">", out);
            xml_text(out, cells[c][0] != '\0' ? cells[c] : "-");
            fputs("</td>", out);
        }
        fputs("</tr>\n", out);
    }
    fputs("</table>\n", out);
}

kvio_status_t report_render_html(const kvio_report_t *report, FILE *out)
{
    /* Which kvio wrote the page, where, when and how (the provenance every
     * output of kvio carries). */
    json_t *head = kvio_provenance_json(&report->provenance, NULL, report->start_ns);
    const json_t *build = json_object_get(head, "build");
    const char *commit = json_string_value(json_object_get(build, "commit"));
    const char *hostname =
        json_string_value(json_object_get(json_object_get(head, "host"), "hostname"));
    const char *when = json_string_value(json_object_get(head, "start_time"));
    char command[2048];
    kvio_provenance_command_line(head, command, sizeof(command));
    fprintf(out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"generator\" content=\"kvio %s\">\n<title>kvio report</title>\n"
            "<style>%s</style>\n</head>\n<body>\n<h1>kvio report</h1>\n"
            "<p class=\"meta\" id=\"provenance\">%zu run%s, %zu cachesim result%s, %zu prefix "
            "result%s, %zu paired-control result%s, %zu mlperf result%s; written by kvio %s "
            "(commit ",
            KVIO_VERSION, style, report->num_runs, report->num_runs == 1 ? "" : "s",
            report->num_cachesims, report->num_cachesims == 1 ? "" : "s", report->num_prefixes,
            report->num_prefixes == 1 ? "" : "s", report->num_paireds,
            report->num_paireds == 1 ? "" : "s", report->num_mlperfs,
            report->num_mlperfs == 1 ? "" : "s", KVIO_VERSION);
    xml_text(out, commit != NULL ? commit : "unknown");
    fputs(") on ", out);
    xml_text(out, hostname != NULL ? hostname : "an unknown host");
    fputs(" at ", out);
    xml_text(out, when != NULL ? when : "an unknown time");
    if (command[0] != '\0') {
        fputs(" as <code>", out);
        xml_text(out, command);
        fputs("</code>", out);
    }
    fputs(". Self-contained: charts are inline SVG.</p>\n", out);
    json_decref(head);
    if (report->num_runs > 0)
        runs_table(out, report);
    results_table(out, report);
    if (report->num_notes > 0) {
        fputs("<ul class=\"notes\" id=\"notes\">\n", out);
        for (size_t i = 0; i < report->num_notes; i++) {
            fputs("<li>", out);
            xml_text(out, report->notes[i]);
            fputs("</li>\n", out);
        }
        fputs("</ul>\n", out);
    }
    /* Sections in the order their first chart appears. */
    bool drawn[REPORT_MAX_CHARTS] = {false};
    for (size_t i = 0; i < report->num_charts; i++) {
        if (drawn[i])
            continue;
        const char *section = report->charts[i]->section;
        fputs("<h2>", out);
        xml_text(out, section);
        fputs("</h2>\n<div class=\"grid\">\n", out);
        for (size_t j = i; j < report->num_charts; j++) {
            const report_chart_t *chart = report->charts[j];
            if (drawn[j] || strcmp(chart->section, section) != 0)
                continue;
            drawn[j] = true;
            fprintf(out, "<figure id=\"%s\">\n", chart->id);
            if (chart->kind == CHART_LINES)
                render_lines(out, chart);
            else
                render_bars(out, chart);
            fputs("<figcaption>", out);
            xml_text(out, chart->caption);
            fputs("</figcaption>\n</figure>\n", out);
        }
        fputs("</div>\n", out);
    }
    fputs("</body>\n</html>\n", out);
    return ferror(out) ? KVIO_ERR_IO : KVIO_OK;
}
