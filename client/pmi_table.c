/*
 * pmi_table.c - the singleton's in-process key-value table; see pmi_table.h.
 */
#include "pmi_table.h"

#include <stdlib.h>
#include <string.h>

struct pmi_entry {
    struct pmi_entry *next;
    char *key;
    char *value;
};

static struct pmi_entry **entry_find(struct pmi_table *t, const char *key)
{
    struct pmi_entry **e = &t->head;

    while (*e != NULL && strcmp((*e)->key, key) != 0)
        e = &(*e)->next;
    return e;
}

int pmi_table_put(struct pmi_table *t, const char *key, const char *value)
{
    struct pmi_entry **slot = entry_find(t, key);
    char *copy = strdup(value);

    if (copy == NULL)
        return -1;
    if (*slot != NULL) {
        free((*slot)->value);
        (*slot)->value = copy;
        return 0;
    }
    struct pmi_entry *e = malloc(sizeof *e);
    if (e == NULL || (e->key = strdup(key)) == NULL) {
        free(e);
        free(copy);
        return -1;
    }
    e->value = copy;
    e->next = NULL;
    *slot = e;
    return 0;
}

const char *pmi_table_get(const struct pmi_table *t, const char *key)
{
    for (const struct pmi_entry *e = t->head; e != NULL; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e->value;
    return NULL;
}

int pmi_table_remove(struct pmi_table *t, const char *key)
{
    struct pmi_entry **slot = entry_find(t, key);
    struct pmi_entry *e = *slot;

    if (e == NULL)
        return -1;
    *slot = e->next;
    free(e->key);
    free(e->value);
    free(e);
    return 0;
}

void pmi_table_clear(struct pmi_table *t)
{
    while (t->head != NULL)
        pmi_table_remove(t, t->head->key);
}
