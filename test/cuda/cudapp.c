// test/cuda/cudapp.c: rewrites a .cu file into C++ the CPU layer compiles, changing
// only what C++ cannot parse, and line for line (with #line), so every compiler
// message and every report of the layer names the original file and line:
//   K<<<grid, block[, smem[, stream]]>>>(args)
//       -> cudacpu::launch(__FILE__, __LINE__, "K", K, grid, block[, ...])(args)
//   extern __shared__ [__align__(N)] T name[];
//       -> T *name = (T *)cudacpu::dyn_smem(N, __FILE__, __LINE__);
//   asm volatile("cp.async.{ca,cg}.shared.global [%0], [%1], B;" :: "r"(s), "l"(g))
//       -> cudacpu::cp_async(s, g, B, cg, __FILE__, __LINE__)   (commit_group,
//          wait_group N and wait_all likewise); any other asm is a compile error there.
//   #include "X.cu"   -> X.cu, rewritten the same way, inline (looked up next to the
//                        including file, then in the -I folders).
// Comments and string literals are copied untouched.
//
//   cudapp [-I dir]... input.cu output.cpp
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char *s; size_t n, cap; } Buf;
static void put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        if (!b->s) { perror("cudapp"); exit(1); }
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void puts_(Buf *b, const char *s) { put(b, s, strlen(s)); }
static void putf(Buf *b, const char *fmt, ...) {
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof tmp) { fprintf(stderr, "cudapp: a rewritten statement is too long\n"); exit(1); }
    put(b, tmp, (size_t)n);
}

static const char *incdirs[16];
static int nincdirs;
static const char *cur_file;
static int cur_line;
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: cudapp: ", cur_file, cur_line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    Buf b = {0};
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) put(&b, tmp, n);
    fclose(f);
    if (!b.s) put(&b, "", 0);
    return b.s;
}
static int is_id(int c) { return isalnum(c) || c == '_'; }
static size_t count_nl(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}
static void put_nl(Buf *b, size_t k) { while (k--) puts_(b, "\n"); }
// Whitespace-trimmed copy of s[0..n)
static char *trim(const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) { s++; n--; }
    while (n && isspace((unsigned char)s[n - 1])) n--;
    char *r = malloc(n + 1);
    memcpy(r, s, n);
    r[n] = 0;
    return r;
}

// Start of the kernel expression that ends at out[end): an identifier, possibly
// qualified (::) and with template arguments (<...>).
static size_t kernel_start(const Buf *out, size_t end) {
    size_t i = end;
    while (i && isspace((unsigned char)out->s[i - 1])) i--;
    for (;;) {
        if (i && out->s[i - 1] == '>') {  // template arguments: back to the matching '<'
            int depth = 0;
            do {
                i--;
                if (out->s[i] == '>') depth++;
                else if (out->s[i] == '<') depth--;
            } while (i && depth);
            while (i && isspace((unsigned char)out->s[i - 1])) i--;
        }
        size_t j = i;
        while (i && is_id((unsigned char)out->s[i - 1])) i--;
        if (i == j) die("cannot find the kernel before <<<");
        if (i >= 2 && out->s[i - 1] == ':' && out->s[i - 2] == ':') { i -= 2; continue; }
        return i;
    }
}

// The operands of an asm statement: "constraint"(expr), ... after the last ':'.
static int asm_operands(const char *ops, char exprs[][256], int max) {
    int n = 0;
    const char *p = ops;
    while (*p && n < max) {
        const char *q = strchr(p, '(');
        if (!q) break;
        int depth = 0;
        const char *r = q;
        do {
            if (*r == '(') depth++;
            else if (*r == ')') depth--;
            r++;
        } while (*r && depth);
        size_t len = (size_t)(r - q);
        if (len >= 256) die("asm operand too long");
        memcpy(exprs[n], q, len);  // keeps the parentheses
        exprs[n][len] = 0;
        n++;
        p = r;
    }
    return n;
}
static void rewrite_asm(Buf *out, const char *stmt) {
    // the string literal(s) of the template
    char text[512] = "";
    const char *p = strchr(stmt, '"'), *colon = NULL;
    while (p && *p == '"') {
        const char *q = p + 1;
        while (*q && *q != '"') q += *q == '\\' ? 2 : 1;
        strncat(text, p + 1, (size_t)(q - p - 1) < sizeof text - strlen(text) - 1 ? (size_t)(q - p - 1) : 0);
        p = q + 1;
        while (isspace((unsigned char)*p)) p++;
        colon = p;
    }
    char ops[4][256];
    int nops = colon ? asm_operands(colon, ops, 4) : 0;
    int bytes = 0;
    char arg[64];
    if (sscanf(text, "cp.async.%*[cag].shared.global [%%0], [%%1], %d", &bytes) == 1 && nops == 2)
        putf(out, "cudacpu::cp_async((size_t)%s, (const void *)%s, %d, %d, __FILE__, __LINE__)", ops[0], ops[1], bytes,
             strncmp(text, "cp.async.cg", 11) == 0);
    else if (strncmp(text, "cp.async.commit_group", 21) == 0)
        puts_(out, "cudacpu::cp_async_commit(__FILE__, __LINE__)");
    else if (sscanf(text, "cp.async.wait_group %63[^;]", arg) == 1)
        putf(out, "cudacpu::cp_async_wait((int)%s, __FILE__, __LINE__)", strcmp(arg, "%0") == 0 && nops == 1 ? ops[0] : arg);
    else if (strncmp(text, "cp.async.wait_all", 17) == 0)
        puts_(out, "(cudacpu::cp_async_commit(__FILE__, __LINE__), cudacpu::cp_async_wait(0, __FILE__, __LINE__))");
    else {
        for (char *c = text; *c; c++)
            if (*c == '\\' || *c == '"') *c = ' ';
        putf(out, "static_assert(sizeof(char) == 0, \"cudapp: inline asm the CPU layer cannot run: %s\")", text);
    }
}
static void rewrite_extern_shared(Buf *out, const char *decl) {
    // decl: everything after "extern __shared__" up to (not including) ';'
    char d[512];
    size_t n = 0;
    long align = 16;
    for (const char *p = decl; *p && n < sizeof d - 1;) {
        if (!strncmp(p, "__align__", 9)) {
            const char *q = strchr(p, '(');
            if (!q) die("__align__ without (N)");
            align = strtol(q + 1, NULL, 0);
            p = strchr(q, ')');
            if (!p) die("__align__( without )");
            p++;
            continue;
        }
        d[n++] = *p++;
    }
    d[n] = 0;
    char *t = trim(d, n);
    size_t len = strlen(t);
    if (len < 3 || strcmp(t + len - 2, "[]")) die("extern __shared__ declaration not of the form T name[]");
    t[len - 2] = 0;
    len -= 2;
    while (len && isspace((unsigned char)t[len - 1])) t[--len] = 0;
    size_t k = len;
    while (k && is_id((unsigned char)t[k - 1])) k--;
    if (k == len || k == 0) die("extern __shared__: no name");
    char *type = trim(t, k);
    putf(out, "%s *%s = (%s *)cudacpu::dyn_smem(%ld, __FILE__, __LINE__)", type, t + k, type, align);
    free(type);
    free(t);
}

static void process(const char *path, Buf *out);

// Looks for X.cu next to `from`, then in the -I folders.
static char *find_include(const char *name, const char *from) {
    char buf[4096];
    const char *slash = strrchr(from, '/');
    if (slash) snprintf(buf, sizeof buf, "%.*s/%s", (int)(slash - from), from, name);
    else snprintf(buf, sizeof buf, "%s", name);
    FILE *f = fopen(buf, "rb");
    for (int i = 0; !f && i < nincdirs; i++) {
        if (!strcmp(incdirs[i], ".")) snprintf(buf, sizeof buf, "%s", name);
        else snprintf(buf, sizeof buf, "%s/%s", incdirs[i], name);
        f = fopen(buf, "rb");
    }
    if (!f) return NULL;
    fclose(f);
    return strdup(buf);
}

static void process(const char *path, Buf *out) {
    char *src = read_all(path);
    if (!src) { fprintf(stderr, "cudapp: cannot read %s\n", path); exit(1); }
    const char *saved_file = cur_file;
    int saved_line = cur_line;
    cur_file = path; cur_line = 1;
    putf(out, "#line 1 \"%s\"\n", path);
    size_t launch_cfg = 0;  // inside <<< ... >>>
    int at_line_start = 1;
    for (const char *p = src; *p;) {
        if (at_line_start) {  // #include "X.cu": inline it
            const char *q = p;
            while (*q == ' ' || *q == '\t') q++;
            char name[1024];
            if (sscanf(q, "#include \"%1023[^\"]\"", name) == 1 && strlen(name) > 3 && !strcmp(name + strlen(name) - 3, ".cu")) {
                char *inc = find_include(name, path);
                if (!inc) die("cannot find %s", name);
                process(inc, out);
                free(inc);
                p = strchr(p, '\n');
                cur_line++;
                putf(out, "#line %d \"%s\"\n", cur_line, path);
                if (!p) break;
                p++;
                continue;
            }
        }
        at_line_start = 0;
        if (p[0] == '/' && p[1] == '/') {  // line comment
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            put(out, p, n);
            p += n;
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            size_t n = e ? (size_t)(e + 2 - p) : strlen(p);
            put(out, p, n);
            cur_line += (int)count_nl(p, n);
            p += n;
            continue;
        }
        if (*p == '"' || *p == '\'') {  // literal
            const char *q = p + 1;
            while (*q && *q != *p && *q != '\n') q += *q == '\\' && q[1] ? 2 : 1;
            if (*q == *p) q++;
            put(out, p, (size_t)(q - p));
            p = q;
            continue;
        }
        if (*p == '\n') { put(out, p, 1); p++; cur_line++; at_line_start = 1; continue; }
        if (!strncmp(p, "<<<", 3)) {
            if (launch_cfg) die("nested <<<");
            size_t s = kernel_start(out, out->n);
            char *name = trim(out->s + s, out->n - s);
            size_t k = 0;
            for (char *c = name; *c; c++)
                if (!isspace((unsigned char)*c)) name[k++] = *c;  // "matmul<a, b>" as one token for the report
            name[k] = 0;
            Buf tail = {0};
            put(&tail, out->s + s, out->n - s);
            out->n = s;
            putf(out, "cudacpu::launch(__FILE__, __LINE__, \"%s\", ", name);
            put(out, tail.s, tail.n);
            puts_(out, ", ");
            free(tail.s);
            free(name);
            launch_cfg = 1;
            p += 3;
            continue;
        }
        if (!strncmp(p, ">>>", 3) && launch_cfg) {
            puts_(out, ")");
            launch_cfg = 0;
            p += 3;
            continue;
        }
        if (is_id((unsigned char)*p) && (p == src || !is_id((unsigned char)p[-1]))) {
            const char *q = p;
            while (is_id((unsigned char)*q)) q++;
            size_t n = (size_t)(q - p);
            const char *r = q;
            while (*r == ' ' || *r == '\t') r++;
            if (n == 6 && !strncmp(p, "extern", 6) && !strncmp(r, "__shared__", 10) && !is_id((unsigned char)r[10])) {
                const char *e = strchr(r, ';');
                if (!e) die("extern __shared__ without ;");
                if (count_nl(r, (size_t)(e - r))) die("extern __shared__ declaration spans lines");
                char *decl = trim(r + 10, (size_t)(e - r - 10));
                rewrite_extern_shared(out, decl);
                free(decl);
                p = e;  // the ';' is copied as usual
                continue;
            }
            if ((n == 3 && !strncmp(p, "asm", 3)) || (n == 7 && !strncmp(p, "__asm__", 7))) {
                const char *e = r;
                int depth = 0, in_str = 0;
                for (; *e; e++) {  // to the ')' that closes the operand list
                    if (in_str) { if (*e == '\\') e++; else if (*e == '"') in_str = 0; continue; }
                    if (*e == '"') in_str = 1;
                    else if (*e == '(') depth++;
                    else if (*e == ')' && --depth == 0) { e++; break; }
                }
                char *stmt = trim(p, (size_t)(e - p));
                rewrite_asm(out, stmt);
                free(stmt);
                size_t nl = count_nl(p, (size_t)(e - p));
                put_nl(out, nl);
                cur_line += (int)nl;
                p = e;
                continue;
            }
            put(out, p, n);
            p = q;
            continue;
        }
        put(out, p, 1);
        p++;
    }
    if (launch_cfg) die("<<< without >>>");
    free(src);
    cur_file = saved_file;
    cur_line = saved_line;
}

int main(int argc, char **argv) {
    const char *in = NULL, *outp = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-I") && i + 1 < argc && nincdirs < 16) incdirs[nincdirs++] = argv[++i];
        else if (!strncmp(argv[i], "-I", 2) && argv[i][2] && nincdirs < 16) incdirs[nincdirs++] = argv[i] + 2;
        else if (!in) in = argv[i];
        else if (!outp) outp = argv[i];
        else in = NULL;
    }
    if (!in || !outp) { fprintf(stderr, "usage: cudapp [-I dir]... input.cu output.cpp\n"); return 2; }
    Buf out = {0};
    process(in, &out);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", outp);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(out.s, 1, out.n, f) != out.n || fclose(f) != 0 || rename(tmp, outp) != 0) {
        fprintf(stderr, "cudapp: cannot write %s\n", outp);
        remove(tmp);
        return 1;
    }
    free(out.s);
    return 0;
}
