/*
 * rks_rdkafka.h - the part of librdkafka's public C API that _rks_native uses.
 *
 * The extension never links against librdkafka: it resolves these functions at
 * run time (dlopen/dlsym) from the copy shipped in confluent-kafka's wheel.
 * Only the types, constants and prototypes the module needs are declared
 * here; every function exists in librdkafka 2.0 and later.  The prototypes
 * are expressed as function-pointer types (RKS_FN list below) so that one
 * table of pointers can be filled by dlsym.
 */
#ifndef RKS_RDKAFKA_H
#define RKS_RDKAFKA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Opaque handles. */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_consumer_group_metadata_s rd_kafka_consumer_group_metadata_t;

/* Error codes are a plain int enum in librdkafka; only the values used here. */
typedef int rd_kafka_resp_err_t;
#define RKS_ERR_NO_ERROR 0
#define RKS_ERR__QUEUE_FULL (-184)
#define RKS_ERR__UNKNOWN_TOPIC (-188)
#define RKS_ERR__INVALID_ARG (-186)
#define RKS_ERR__CRIT_SYS_RESOURCE (-194)
#define RKS_ERR__FATAL (-150)

/* rd_kafka_type_t */
#define RKS_PRODUCER 0

/* rd_kafka_conf_res_t */
typedef int rd_kafka_conf_res_t;
#define RKS_CONF_OK 0

/* Arguments of rd_kafka_producev(): a tag (rd_kafka_vtype_t) then its value(s). */
#define RKS_VTYPE_END 0
#define RKS_VTYPE_TOPIC 1     /* const char * */
#define RKS_VTYPE_RKT 2       /* rd_kafka_topic_t * */
#define RKS_VTYPE_PARTITION 3 /* int32_t */
#define RKS_VTYPE_VALUE 4     /* void *, size_t */
#define RKS_VTYPE_KEY 5       /* const void *, size_t */
#define RKS_VTYPE_OPAQUE 6    /* void * */
#define RKS_VTYPE_MSGFLAGS 7  /* int */
#define RKS_VTYPE_TIMESTAMP 8 /* int64_t */
#define RKS_VTYPE_HEADERS 10  /* rd_kafka_headers_t * */

#define RKS_MSG_F_COPY 0x2
#define RKS_PARTITION_UA ((int32_t)-1)
#define RKS_PURGE_F_QUEUE 0x1
#define RKS_PURGE_F_INFLIGHT 0x2

/* The message as a delivery report callback sees it (public struct layout). */
typedef struct rks_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private; /* producer: the msg_opaque given to producev */
} rks_message_t;

/* One entry of a topic-partition list (public struct layout); filled through
 * rd_kafka_topic_partition_list_add(), which returns a pointer to it. */
typedef struct rks_topic_partition_s {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    rd_kafka_resp_err_t err;
    void *_private;
} rks_topic_partition_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t; /* used opaquely */

/* Callback types. */
typedef void (*rks_dr_msg_cb_t)(rd_kafka_t *, const rks_message_t *, void *);
typedef void (*rks_error_cb_t)(rd_kafka_t *, int, const char *, void *);
typedef int (*rks_stats_cb_t)(rd_kafka_t *, char *, size_t, void *);
typedef void (*rks_log_cb_t)(const rd_kafka_t *, int, const char *, const char *);
typedef void (*rks_oauth_cb_t)(rd_kafka_t *, const char *, void *);

/*
 * X(name, return type, parameter list): every function resolved by load().
 */
#define RKS_FN_LIST(X)                                                                  \
    X(rd_kafka_version, int, (void))                                                    \
    X(rd_kafka_version_str, const char *, (void))                                       \
    X(rd_kafka_err2str, const char *, (rd_kafka_resp_err_t))                            \
    X(rd_kafka_err2name, const char *, (rd_kafka_resp_err_t))                           \
    X(rd_kafka_last_error, rd_kafka_resp_err_t, (void))                                 \
    X(rd_kafka_fatal_error, rd_kafka_resp_err_t, (rd_kafka_t *, char *, size_t))        \
    X(rd_kafka_test_fatal_error, rd_kafka_resp_err_t,                                   \
      (rd_kafka_t *, rd_kafka_resp_err_t, const char *))                                \
    X(rd_kafka_conf_new, rd_kafka_conf_t *, (void))                                     \
    X(rd_kafka_conf_destroy, void, (rd_kafka_conf_t *))                                 \
    X(rd_kafka_conf_set, rd_kafka_conf_res_t,                                           \
      (rd_kafka_conf_t *, const char *, const char *, char *, size_t))                  \
    X(rd_kafka_conf_set_opaque, void, (rd_kafka_conf_t *, void *))                      \
    X(rd_kafka_conf_set_dr_msg_cb, void, (rd_kafka_conf_t *, rks_dr_msg_cb_t))          \
    X(rd_kafka_conf_set_error_cb, void, (rd_kafka_conf_t *, rks_error_cb_t))            \
    X(rd_kafka_conf_set_stats_cb, void, (rd_kafka_conf_t *, rks_stats_cb_t))            \
    X(rd_kafka_conf_set_log_cb, void, (rd_kafka_conf_t *, rks_log_cb_t))                \
    X(rd_kafka_conf_set_oauthbearer_token_refresh_cb, void,                             \
      (rd_kafka_conf_t *, rks_oauth_cb_t))                                              \
    X(rd_kafka_new, rd_kafka_t *, (int, rd_kafka_conf_t *, char *, size_t))             \
    X(rd_kafka_destroy, void, (rd_kafka_t *))                                           \
    X(rd_kafka_opaque, void *, (const rd_kafka_t *))                                    \
    X(rd_kafka_set_log_queue, rd_kafka_resp_err_t, (rd_kafka_t *, rd_kafka_queue_t *))  \
    X(rd_kafka_topic_new, rd_kafka_topic_t *,                                           \
      (rd_kafka_t *, const char *, rd_kafka_topic_conf_t *))                            \
    X(rd_kafka_topic_destroy, void, (rd_kafka_topic_t *))                               \
    X(rd_kafka_headers_new, rd_kafka_headers_t *, (size_t))                             \
    X(rd_kafka_headers_destroy, void, (rd_kafka_headers_t *))                           \
    X(rd_kafka_header_add, rd_kafka_resp_err_t,                                         \
      (rd_kafka_headers_t *, const char *, ssize_t, const void *, ssize_t))             \
    X(rd_kafka_producev, rd_kafka_resp_err_t, (rd_kafka_t *, ...))                      \
    X(rd_kafka_poll, int, (rd_kafka_t *, int))                                          \
    X(rd_kafka_flush, rd_kafka_resp_err_t, (rd_kafka_t *, int))                         \
    X(rd_kafka_purge, rd_kafka_resp_err_t, (rd_kafka_t *, int))                         \
    X(rd_kafka_outq_len, int, (rd_kafka_t *))                                           \
    X(rd_kafka_oauthbearer_set_token, rd_kafka_resp_err_t,                              \
      (rd_kafka_t *, const char *, int64_t, const char *, const char **, size_t,        \
       char *, size_t))                                                                 \
    X(rd_kafka_oauthbearer_set_token_failure, rd_kafka_resp_err_t,                      \
      (rd_kafka_t *, const char *))                                                     \
    X(rd_kafka_init_transactions, rd_kafka_error_t *, (rd_kafka_t *, int))              \
    X(rd_kafka_begin_transaction, rd_kafka_error_t *, (rd_kafka_t *))                   \
    X(rd_kafka_commit_transaction, rd_kafka_error_t *, (rd_kafka_t *, int))             \
    X(rd_kafka_abort_transaction, rd_kafka_error_t *, (rd_kafka_t *, int))              \
    X(rd_kafka_send_offsets_to_transaction, rd_kafka_error_t *,                         \
      (rd_kafka_t *, const rd_kafka_topic_partition_list_t *,                           \
       const rd_kafka_consumer_group_metadata_t *, int))                                \
    X(rd_kafka_consumer_group_metadata_new, rd_kafka_consumer_group_metadata_t *,       \
      (const char *))                                                                   \
    X(rd_kafka_consumer_group_metadata_destroy, void,                                   \
      (rd_kafka_consumer_group_metadata_t *))                                           \
    X(rd_kafka_topic_partition_list_new, rd_kafka_topic_partition_list_t *, (int))      \
    X(rd_kafka_topic_partition_list_add, rks_topic_partition_t *,                       \
      (rd_kafka_topic_partition_list_t *, const char *, int32_t))                       \
    X(rd_kafka_topic_partition_list_destroy, void, (rd_kafka_topic_partition_list_t *)) \
    X(rd_kafka_error_code, rd_kafka_resp_err_t, (const rd_kafka_error_t *))             \
    X(rd_kafka_error_name, const char *, (const rd_kafka_error_t *))                    \
    X(rd_kafka_error_string, const char *, (const rd_kafka_error_t *))                  \
    X(rd_kafka_error_is_fatal, int, (const rd_kafka_error_t *))                         \
    X(rd_kafka_error_is_retriable, int, (const rd_kafka_error_t *))                     \
    X(rd_kafka_error_txn_requires_abort, int, (const rd_kafka_error_t *))               \
    X(rd_kafka_error_destroy, void, (rd_kafka_error_t *))

#endif /* RKS_RDKAFKA_H */
