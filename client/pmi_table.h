/*
 * pmi_table.h - a small key-value table in the process's own memory.
 *
 * What a singleton (a process started without a process manager) uses in
 * place of the server: its key-value store, node attributes and published
 * names. A linked list: a singleton has few keys, and this keeps the
 * library small. Not locked; callers hold their library's lock.
 */
#ifndef PMI_TABLE_H
#define PMI_TABLE_H

struct pmi_entry;

struct pmi_table {
    struct pmi_entry *head;
};

/* Set key to value (a later put wins): 0, or -1 when out of memory. */
int pmi_table_put(struct pmi_table *t, const char *key, const char *value);
/* The value of key, or NULL. */
const char *pmi_table_get(const struct pmi_table *t, const char *key);
/* Remove key: 0, or -1 if it was not there. */
int pmi_table_remove(struct pmi_table *t, const char *key);
void pmi_table_clear(struct pmi_table *t);

#endif
