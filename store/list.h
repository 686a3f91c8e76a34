/*
 * list.h - the intrusive doubly linked lists of the store's queues (entries
 * of the DRAM tier's queues, of a segment, of the tombstones; segments).
 */
#ifndef KVSTASH_STORE_LIST_H
#define KVSTASH_STORE_LIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct list {
	struct list *prev, *next;
};

static inline void list_init(struct list *l)
{
	l->prev = l->next = l;
}

static inline bool list_empty(const struct list *l)
{
	return l->next == l;
}

/* Inserts @n right after @head (the "newest" end). */
static inline void list_push(struct list *head, struct list *n)
{
	n->next = head->next;
	n->prev = head;
	head->next->prev = n;
	head->next = n;
}

static inline void list_del(struct list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = n;
}

/* The oldest element (tail), or NULL. */
static inline struct list *list_oldest(struct list *head)
{
	return list_empty(head) ? NULL : head->prev;
}

#define list_entry(ptr, type, member)                                          \
	((type *)((char *)(ptr)-offsetof(type, member)))

#endif
