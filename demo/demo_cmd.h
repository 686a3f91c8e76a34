/*
 * demo_cmd.h - `kvstash demo`, as tools/cmd.h's subcommands.
 */
#ifndef KVSTASH_DEMO_CMD_H
#define KVSTASH_DEMO_CMD_H

/* cmd_demo.c with the daemon (KVS_DEMO_FULL), else demo_block.c */
int kvs_cmd_demo(int argc, char **argv);
int kvs_cmd_demo_node(int argc, char **argv); /* demo_node.c */

#endif
