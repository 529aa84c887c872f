// Package delayspec is what the delay topology's client (packages amqpdelay, consumer, revoke
// and schedule) and its administration (package topology and the rabbitdelay CLI) share: the
// specification of a topology ([Spec]) and its validation, the one naming rule of its objects
// ([Names], [IsDelayQueueName], [Names.DelayQueuesPattern]), and the reader of the AMQPDELAY_*
// variables ([ReadEnv]). It does no I/O besides reading the environment, and imports nothing of
// the administration side.
package delayspec
