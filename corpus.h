// corpus.h: the built-in corpus, review-like English generated from a seed, so the
// trainers run on a fresh machine with no download and the transfer evaluation has
// labelled documents offline. Each document draws a star rating (skewed to 5 like the
// Amazon reviews), a product category, product, brand, and a title, then sentences
// whose valence (-2..+2) is drawn from a distribution that depends on the rating;
// valence is realised directly ("sturdy"), by negation ("not flimsy at all") or by a
// verb phrase ("broke after 3 weeks"), with intensifiers. Random brand names and
// numbers keep a small model learning for a long time. data.h's corpus_stream frames
// the documents into a stream.
#pragma once
#include "util.h"  // defines: rng_next, rng_uniform

#define CORPUS_DOC_MAX 4096  // a document's text is always shorter than this
#define CORPUS_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

// ----------------------------------------------------------------------------
// Word lists. A category has products and the aspects a review talks about.

typedef struct {
    const char *name;
    const char *const *products, *const *aspects;
    int n_products, n_aspects;
} CorpusCategory;

static const char *const corpus_kitchen_p[] = {"blender", "coffee maker", "toaster", "kettle",
    "air fryer", "knife set", "frying pan", "rice cooker", "stand mixer", "food processor",
    "waffle iron", "spice grinder"};
static const char *const corpus_kitchen_a[] = {"motor", "lid", "blades", "handle", "cord",
    "buttons", "carafe", "nonstick coating", "timer", "cleanup", "temperature control", "design"};
static const char *const corpus_elec_p[] = {"headphones", "bluetooth speaker", "phone charger",
    "keyboard", "wireless mouse", "monitor", "tablet", "webcam", "power bank", "router",
    "smart watch", "earbuds"};
static const char *const corpus_elec_a[] = {"battery life", "sound quality", "screen", "cable",
    "buttons", "range", "bass", "microphone", "setup", "app", "charging speed", "build quality"};
static const char *const corpus_book_p[] = {"novel", "cookbook", "biography", "thriller",
    "travel guide", "textbook", "memoir", "short story collection", "fantasy series",
    "history book", "mystery", "poetry collection"};
static const char *const corpus_book_a[] = {"plot", "characters", "writing", "ending", "pacing",
    "dialogue", "recipes", "photos", "research", "binding", "first chapter", "narrator"};
static const char *const corpus_out_p[] = {"tent", "backpack", "water bottle", "sleeping bag",
    "pair of hiking boots", "camping stove", "flashlight", "cooler", "hammock", "rain jacket",
    "trekking pole", "headlamp"};
static const char *const corpus_out_a[] = {"zipper", "straps", "seams", "weight", "fabric",
    "insulation", "sole", "lid", "stitching", "pockets", "hood", "waterproofing"};
static const char *const corpus_toy_p[] = {"puzzle", "board game", "doll", "building set",
    "toy car", "drone", "kite", "card game", "stuffed bear", "train set", "science kit",
    "play tent"};
static const char *const corpus_toy_a[] = {"pieces", "instructions", "box", "colors", "rules",
    "paint", "wheels", "remote", "size", "packaging", "replay value", "batteries"};
static const char *const corpus_beauty_p[] = {"shampoo", "face cream", "hair dryer", "razor",
    "perfume", "lipstick", "sunscreen", "electric toothbrush", "nail polish", "conditioner",
    "body lotion", "curling iron"};
static const char *const corpus_beauty_a[] = {"scent", "texture", "bottle", "pump", "color",
    "formula", "brush head", "heat settings", "packaging", "staying power", "ingredients", "price"};
static const char *const corpus_home_p[] = {"vacuum", "desk lamp", "pillow", "shower curtain",
    "office chair", "bookshelf", "rug", "set of curtains", "mattress", "tower fan", "space heater",
    "laundry basket"};
static const char *const corpus_home_a[] = {"suction", "filter", "assembly", "cushion", "wheels",
    "finish", "noise level", "remote", "brightness", "fabric", "instructions", "frame"};
static const char *const corpus_media_p[] = {"album", "movie", "documentary", "box set",
    "soundtrack", "concert film", "first season", "vinyl record", "audiobook", "anime series"};
static const char *const corpus_media_a[] = {"songs", "acting", "story", "sound quality", "extras",
    "lyrics", "cinematography", "running time", "soundtrack", "subtitles"};
static const char *const corpus_tool_p[] = {"cordless drill", "screwdriver set", "tape measure",
    "ladder", "circular saw", "wrench set", "glue gun", "toolbox", "socket set", "stud finder"};
static const char *const corpus_tool_a[] = {"chuck", "battery", "grip", "case", "blade", "torque",
    "latch", "trigger", "accuracy", "storage"};
static const char *const corpus_pet_p[] = {"dog bed", "cat toy", "leash", "litter box",
    "bag of dog food", "bird feeder", "aquarium filter", "pet brush", "scratching post",
    "cat carrier"};
static const char *const corpus_pet_a[] = {"smell", "size", "material", "clasp", "ingredients",
    "bristles", "base", "door", "cushion", "price"};

#define CORPUS_CAT(name, p, a) {name, p, a, CORPUS_N(p), CORPUS_N(a)}
static const CorpusCategory corpus_categories[] = {
    CORPUS_CAT("kitchen", corpus_kitchen_p, corpus_kitchen_a),
    CORPUS_CAT("electronics", corpus_elec_p, corpus_elec_a),
    CORPUS_CAT("books", corpus_book_p, corpus_book_a),
    CORPUS_CAT("outdoors", corpus_out_p, corpus_out_a),
    CORPUS_CAT("toys", corpus_toy_p, corpus_toy_a),
    CORPUS_CAT("beauty", corpus_beauty_p, corpus_beauty_a),
    CORPUS_CAT("home", corpus_home_p, corpus_home_a),
    CORPUS_CAT("media", corpus_media_p, corpus_media_a),
    CORPUS_CAT("tools", corpus_tool_p, corpus_tool_a),
    CORPUS_CAT("pets", corpus_pet_p, corpus_pet_a),
};

// adjectives by valence: strong positive, mild positive, mild negative, strong negative
static const char *const corpus_adj_pos2[] = {"excellent", "amazing", "fantastic", "perfect",
    "outstanding", "superb", "wonderful", "brilliant", "flawless", "incredible", "top notch",
    "beautiful"};
static const char *const corpus_adj_pos1[] = {"good", "nice", "solid", "decent", "sturdy",
    "reliable", "comfortable", "useful", "pleasant", "well made", "easy to use",
    "better than expected", "fine"};
static const char *const corpus_adj_neg1[] = {"flimsy", "cheap", "weak", "disappointing", "noisy",
    "awkward", "mediocre", "slow", "uncomfortable", "confusing", "loose", "fragile"};
static const char *const corpus_adj_neg2[] = {"terrible", "awful", "horrible", "useless",
    "defective", "pathetic", "dreadful", "a complete joke", "garbage", "dangerous", "broken",
    "worthless"};
static const char *const corpus_int_strong[] = {"absolutely ", "truly ", "simply ", "just ",
    "totally ", ""};
static const char *const corpus_int_mild[] = {"very ", "really ", "quite ", "pretty ", "super ",
    "incredibly ", "extremely ", "so ", "fairly ", "", "", ""};
static const char *const corpus_people[] = {"wife", "husband", "son", "daughter", "roommate", "mom",
    "dad", "best friend", "neighbor", "little brother", "grandmother", "coworker"};
static const char *const corpus_units[] = {"days", "weeks", "months", "uses", "washes", "trips"};
static const char *const corpus_numbers[] = {"two", "three", "four", "five", "six", "2", "3", "4",
    "5", "6", "7", "10", "12"};
static const char *const corpus_syllables[] = {"zor", "ka", "ven", "tri", "lo", "mex", "ar", "qui",
    "bel", "on", "sta", "rix", "na", "pol", "dur", "fi", "gen", "tek", "mo", "sun", "ex", "vi",
    "cor", "la"};

// ----------------------------------------------------------------------------
// Sentence templates: "%A" aspect, "%V" is/are to agree with it, "%P" product, "%B"
// brand, "%J" adjective phrase of the sentence's valence, "%N %U" a duration, "%R" a
// person. The first letter of each sentence is capitalised.

static const char *const corpus_tpl_adj[] = {"the %A %V %J. ", "the %A %V %J, if you ask me. ",
    "honestly, the %A %V %J. ", "I found the %A %J. ", "the %A turned out to be %J. ",
    "for the price, the %A %V %J. ", "my %R thinks the %A %V %J. ", "overall the %A %V %J. ",
    "as for the %A: %J. ", "the %A on this %P %V %J. "};
static const char *const corpus_tpl_pos2[] = {"I absolutely love the %A! ",
    "the %A worked like a charm. ", "the %A exceeded my expectations. ",
    "this %P is worth every penny. ", "%B really got the %A right. ", "my %R loves it too! "};
static const char *const corpus_tpl_pos1[] = {"the %A did the job. ",
    "no complaints about the %A so far. ", "the %A held up after %N %U. ",
    "it works as described. ", "the %A %V what I expected from %B. "};
static const char *const corpus_tpl_neg1[] = {"the %A could be better. ",
    "I wish the %A were better. ", "the %A started to wear after %N %U. ",
    "it does not quite work as described. ", "I expected more from %B. "};
static const char *const corpus_tpl_neg2[] = {"the %A stopped working after %N %U. ",
    "the %A broke the first time I used it. ", "I regret buying this %P. ",
    "%B clearly does not care about the %A. ", "I hate the %A. ",
    "customer service from %B never answered. "};
static const char *const corpus_tpl_open[] = {"I bought this %P %N %U ago. ",
    "I got this %P as a gift for my %R. ", "we have been using this %P for %N %U now. ",
    "this is my second %P from %B. ", "I ordered the %B %P after reading the reviews. ",
    "my %R recommended this %P. ", "I needed a new %P and picked this one. "};
static const char *const corpus_title_pos[] = {"Five stars", "Love it!", "Best %P ever", "Great %P",
    "Highly recommend", "Exactly what I needed", "Wonderful", "Worth it"};
static const char *const corpus_title_mid[] = {"It's okay", "Mixed feelings", "Not bad, not great",
    "Average %P", "Does the job, mostly", "Three stars"};
static const char *const corpus_title_neg[] = {"One star", "Junk", "Do not buy",
    "Broke after %N %U", "Waste of money", "Very disappointed", "Returned it"};
static const char *const corpus_close_pos[] = {"I would definitely recommend it.",
    "Would buy again.", "Highly recommended!", "Five stars from me.", "Great value for the money."};
static const char *const corpus_close_mid[] = {"It is fine for the price.",
    "Maybe wait for a sale.", "It is okay, I guess.", "Three stars.",
    "Not sure I would buy it again."};
static const char *const corpus_close_neg[] = {"I would not recommend it.", "Save your money.",
    "I am returning it.", "Avoid this one.", "One star is too many."};

// ----------------------------------------------------------------------------
// Writing a document

typedef struct {
    char *p;
    size_t n, cap;
} CorpusText;

// Appends s, cut where the text is full (it stays NUL-terminated).
static inline void corpus_cat(CorpusText *d, const char *s) {
    for (; *s && d->n + 1 < d->cap; s++) {
        d->p[d->n] = *s;
        d->n++;
    }
    d->p[d->n] = 0;
}

static const char *corpus_pick_(uint64_t *rng, const char *const *a, int n) {
    return a[rng_next(rng) % (uint64_t)n];
}
#define corpus_pick(rng, a) corpus_pick_((rng), (a), CORPUS_N(a))  // one entry of a word list

static inline int corpus_chance(uint64_t *rng, double p) { return rng_uniform(rng) < p; }

// What a template's slots are filled with.
typedef struct {
    const char *aspect, *product, *brand;
    int valence;
} CorpusSlots;

// An adjective phrase of the given valence. It is realised directly or, a third of
// the time for mild valence, by negating the opposite ("not flimsy at all" is mildly
// positive, "not very good" mildly negative).
static inline void corpus_adjective(CorpusText *d, uint64_t *rng, int valence) {
    int negate = (valence == 1 || valence == -1) && corpus_chance(rng, 0.33);
    if (negate && valence > 0) {
        corpus_cat(d, "not ");
        corpus_cat(d, corpus_pick(rng, corpus_adj_neg1));
        if (corpus_chance(rng, 0.5)) corpus_cat(d, " at all");
        return;
    }
    if (negate) {
        corpus_cat(d, "not ");
        corpus_cat(d, corpus_chance(rng, 0.5) ? "very " : "that ");
        corpus_cat(d, corpus_pick(rng, corpus_adj_pos1));
        return;
    }
    if (valence == 2) {
        corpus_cat(d, corpus_pick(rng, corpus_int_strong));
        corpus_cat(d, corpus_pick(rng, corpus_adj_pos2));
    } else if (valence == 1) {
        corpus_cat(d, corpus_pick(rng, corpus_int_mild));
        corpus_cat(d, corpus_pick(rng, corpus_adj_pos1));
    } else if (valence == -1) {
        corpus_cat(d, corpus_pick(rng, corpus_int_mild));
        corpus_cat(d, corpus_pick(rng, corpus_adj_neg1));
    } else {
        corpus_cat(d, corpus_pick(rng, corpus_int_strong));
        corpus_cat(d, corpus_pick(rng, corpus_adj_neg2));
    }
}

// Whether a noun takes "are": "the blades are", "the bass is".
static inline int corpus_plural(const char *noun) {
    size_t n = strlen(noun);
    return noun[n - 1] == 's' && noun[n - 2] != 's';
}

// Appends what the template slot `code` stands for.
static inline void corpus_slot(CorpusText *d, uint64_t *rng, const CorpusSlots *s, char code) {
    if (code == 'A') corpus_cat(d, s->aspect);
    else if (code == 'V') corpus_cat(d, corpus_plural(s->aspect) ? "are" : "is");
    else if (code == 'P') corpus_cat(d, s->product);
    else if (code == 'B') corpus_cat(d, s->brand);
    else if (code == 'J') corpus_adjective(d, rng, s->valence);
    else if (code == 'N') corpus_cat(d, corpus_pick(rng, corpus_numbers));
    else if (code == 'U') corpus_cat(d, corpus_pick(rng, corpus_units));
    else if (code == 'R') corpus_cat(d, corpus_pick(rng, corpus_people));
}

// Appends template tpl with its slots filled; capitalize: the first letter upper case.
static inline void corpus_fill(CorpusText *d, uint64_t *rng, const char *tpl, const CorpusSlots *s,
                               int capitalize) {
    size_t sentence_start = d->n;
    for (const char *c = tpl; *c; c++) {
        if (*c == '%') {
            c++;
            corpus_slot(d, rng, s, *c);
        } else {
            char one[2] = {*c, 0};
            corpus_cat(d, one);
        }
    }
    char *first = &d->p[sentence_start];
    if (capitalize && d->n > sentence_start && *first >= 'a' && *first <= 'z') *first -= 32;
}

// A sentence about one aspect at the sentence's valence: a contrast with another
// aspect at the opposite valence ("The lid is sturdy, but the cord is flimsy.") when
// `contrast`, else a template of that valence (or one for any valence).
static inline void corpus_sentence(CorpusText *d, uint64_t *rng, const CorpusCategory *cat,
                                   const CorpusSlots *slots, int contrast) {
    if (contrast) {
        CorpusSlots other = *slots;
        other.valence = -slots->valence;
        int ka = (int)(rng_next(rng) % (uint64_t)(cat->n_aspects - 1));  // any aspect but this one
        int same = cat->aspects[ka] == slots->aspect;
        other.aspect = cat->aspects[same ? cat->n_aspects - 1 : ka];
        corpus_fill(d, rng, "the %A %V %J, ", slots, 1);
        int but = corpus_chance(rng, 0.5);
        corpus_fill(d, rng, but ? "but the %A %V %J. " : "although the %A %V %J. ", &other, 0);
        return;
    }
    const char *tpl;
    if (corpus_chance(rng, 0.6)) tpl = corpus_pick(rng, corpus_tpl_adj);
    else if (slots->valence == 2) tpl = corpus_pick(rng, corpus_tpl_pos2);
    else if (slots->valence == 1) tpl = corpus_pick(rng, corpus_tpl_pos1);
    else if (slots->valence == -1) tpl = corpus_pick(rng, corpus_tpl_neg1);
    else tpl = corpus_pick(rng, corpus_tpl_neg2);
    corpus_fill(d, rng, tpl, slots, 1);
}

// Writes one document's text (no framing, no newline) into text (cap >= CORPUS_DOC_MAX),
// sets *len, and returns its star rating 1..5.
static inline int corpus_document(uint64_t *rng, char *text, size_t cap, size_t *len) {
    // P(stars) roughly as in the Amazon reviews: many 5s, some 1s, few in between
    static const double star_cdf[5] = {0.12, 0.20, 0.30, 0.52, 1.0};
    // P(sentence valence -2, -1, +1, +2 | stars): the text's sentiment agrees with the rating
    static const double valence_p[5][4] = {
        {0.60, 0.35, 0.05, 0.00},
        {0.20, 0.60, 0.20, 0.00},
        {0.05, 0.45, 0.45, 0.05},
        {0.00, 0.20, 0.60, 0.20},
        {0.00, 0.05, 0.35, 0.60},
    };
    static const int valence_of[4] = {-2, -1, 1, 2};
    static const char *const compare[5] = {"it is far worse than my old %P. ",
        "it is worse than my old %P. ", "it is about the same as my old %P. ",
        "it is better than my old %P. ", "it is much better than my old %P. "};
    static const char *const star_words[5] = {"one star", "two stars", "three stars",
        "four stars", "five stars"};
    double u = rng_uniform(rng);
    int stars = 1;
    while (stars < 5 && u >= star_cdf[stars - 1]) stars++;
    int n_categories = CORPUS_N(corpus_categories);
    const CorpusCategory *cat = &corpus_categories[rng_next(rng) % (uint64_t)n_categories];
    char brand[32];
    int nsyl = 2 + (int)(rng_next(rng) % 2);
    brand[0] = 0;
    for (int i = 0; i < nsyl; i++) strcat(brand, corpus_pick(rng, corpus_syllables));
    brand[0] = (char)(brand[0] - 32);
    CorpusSlots slots;
    slots.product = cat->products[rng_next(rng) % (uint64_t)cat->n_products];
    slots.brand = brand;
    slots.aspect = cat->aspects[0];
    slots.valence = stars >= 4 ? 1 : -1;
    CorpusText d;
    d.p = text;
    d.n = 0;
    d.cap = cap < CORPUS_DOC_MAX ? cap : CORPUS_DOC_MAX;
    d.p[0] = 0;
    // the title, as its own sentence
    const char *title;
    if (stars >= 4) title = corpus_pick(rng, corpus_title_pos);
    else if (stars == 3) title = corpus_pick(rng, corpus_title_mid);
    else title = corpus_pick(rng, corpus_title_neg);
    corpus_fill(&d, rng, title, &slots, 1);
    corpus_cat(&d, d.p[d.n - 1] == '!' ? " " : ". ");
    if (corpus_chance(rng, 0.6)) corpus_fill(&d, rng, corpus_pick(rng, corpus_tpl_open), &slots, 1);
    int n_sentences = 1 + (int)(rng_next(rng) % 5);
    for (int i = 0; i < n_sentences; i++) {
        double v = rng_uniform(rng), acc = 0;
        int k = 0;
        while (k < 3 && v >= (acc += valence_p[stars - 1][k])) k++;
        slots.valence = valence_of[k];
        slots.aspect = cat->aspects[rng_next(rng) % (uint64_t)cat->n_aspects];
        int contrast = corpus_chance(rng, 0.15) && i + 1 < n_sentences;
        corpus_sentence(&d, rng, cat, &slots, contrast);
    }
    if (corpus_chance(rng, 0.3)) corpus_fill(&d, rng, compare[stars - 1], &slots, 1);  // comparison
    if (corpus_chance(rng, 0.15)) {
        corpus_cat(&d, "I would give it ");
        corpus_cat(&d, star_words[stars - 1]);
        corpus_cat(&d, ". ");
    }
    if (stars >= 4) corpus_cat(&d, corpus_pick(rng, corpus_close_pos));
    else if (stars == 3) corpus_cat(&d, corpus_pick(rng, corpus_close_mid));
    else corpus_cat(&d, corpus_pick(rng, corpus_close_neg));
    *len = d.n;
    return stars;
}
